import django_filters

from apps.clusters.models import Cluster


class ClusterFilterSet(django_filters.FilterSet):
    """One filter set for the web list and the API."""

    q = django_filters.CharFilter(method="search", label="Search")

    class Meta:
        model = Cluster
        fields = ["environment", "region", "storage_level", "status"]

    def search(self, queryset, name, value):
        return queryset.filter(name__icontains=value) | queryset.filter(description__icontains=value)
