import django_filters

from apps.governance.api import ApplicationFilterSet
from apps.topics.models import App, Topic, TopicApplication


class TopicFilterSet(django_filters.FilterSet):
    """One filter set for the web list and the API."""

    q = django_filters.CharFilter(method="search", label="Search")
    team = django_filters.CharFilter(field_name="team__name")
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = Topic
        fields = ["environment", "team", "cluster", "status", "ordered", "transactional"]

    def search(self, queryset, name, value):
        return queryset.filter(name__icontains=value) | queryset.filter(description__icontains=value)


class AppFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__name")

    class Meta:
        model = App
        fields = ["team", "active"]


class TopicApplicationFilterSet(ApplicationFilterSet):
    team = django_filters.CharFilter(field_name="team__name")
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = TopicApplication
        fields = ["state", "environment", "team", "cluster", "applicant"]
