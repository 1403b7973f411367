import django_filters

from apps.provisioning.models import ReconcileRun, SyncState


class SyncStateFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = SyncState
        fields = ["cluster", "kind", "state", "object_id"]


class ReconcileRunFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    drift = django_filters.BooleanFilter(method="filter_drift", label="Found drift")

    class Meta:
        model = ReconcileRun
        fields = ["cluster", "repair", "reachable"]

    def filter_drift(self, queryset, name, value):
        drifted = queryset.filter(missing__gt=0) | queryset.filter(unexpected__gt=0) | queryset.filter(different__gt=0)
        if value is None:
            return queryset
        return drifted if value else queryset.exclude(pk__in=drifted.values("pk"))
