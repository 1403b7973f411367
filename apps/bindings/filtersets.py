import django_filters

from apps.bindings.models import Binding, BindingApplication, GrantApplication, ProducerGrant
from apps.governance.api import ApplicationFilterSet


class BindingFilterSet(django_filters.FilterSet):
    """One filter set for the web list and the API."""

    topic = django_filters.CharFilter(field_name="topic__name")
    app = django_filters.CharFilter(field_name="app__app_id")
    cluster = django_filters.CharFilter(field_name="topic__cluster__name")
    environment = django_filters.CharFilter(field_name="topic__environment")

    class Meta:
        model = Binding
        fields = ["topic", "app", "group", "mode", "status", "cluster", "environment"]


class ProducerGrantFilterSet(django_filters.FilterSet):
    topic = django_filters.CharFilter(field_name="topic__name")
    app = django_filters.CharFilter(field_name="app__app_id")

    class Meta:
        model = ProducerGrant
        fields = ["topic", "app", "status"]


class BindingApplicationFilterSet(ApplicationFilterSet):
    topic = django_filters.CharFilter(field_name="topic__name")
    app = django_filters.CharFilter(field_name="app__app_id")

    class Meta:
        model = BindingApplication
        fields = ["state", "topic", "app", "group", "applicant"]


class GrantApplicationFilterSet(ApplicationFilterSet):
    topic = django_filters.CharFilter(field_name="topic__name")
    app = django_filters.CharFilter(field_name="app__app_id")

    class Meta:
        model = GrantApplication
        fields = ["state", "topic", "app", "applicant"]
