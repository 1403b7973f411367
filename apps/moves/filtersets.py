import django_filters

from apps.moves.choices import MoveState
from apps.moves.models import TopicMove


class TopicMoveFilterSet(django_filters.FilterSet):
    topic = django_filters.CharFilter(field_name="topic__name")
    environment = django_filters.CharFilter(field_name="topic__environment")
    source = django_filters.CharFilter(field_name="source__name")
    target = django_filters.CharFilter(field_name="target__name")
    state = django_filters.MultipleChoiceFilter(choices=MoveState.choices)

    class Meta:
        model = TopicMove
        fields = ["topic", "environment", "source", "target", "state"]
