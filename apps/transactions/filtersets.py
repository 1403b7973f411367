import django_filters

from apps.transactions.choices import RedriveState, TxState
from apps.transactions.models import PreparedMessage, Redrive


class PreparedMessageFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    state = django_filters.MultipleChoiceFilter(choices=TxState.choices)

    class Meta:
        model = PreparedMessage
        fields = ["cluster", "topic", "app_id", "state", "broker", "message_id", "business_id"]


class RedriveFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    state = django_filters.MultipleChoiceFilter(choices=RedriveState.choices)

    class Meta:
        model = Redrive
        fields = ["cluster", "topic", "group", "state"]
