import django_filters
from django import forms

from apps.audit.models import AuditRecord
from control_plane.filters import IsoDateTimeFilter

_DT = forms.DateTimeInput(attrs={"type": "datetime-local"})


class AuditRecordFilterSet(django_filters.FilterSet):
    """Search the governance audit log by actor, object, action and time (web, API and CSV export)."""

    actor = django_filters.CharFilter(field_name="actor_name", label="Actor")
    action = django_filters.CharFilter(method="by_action", label="Action",
                                       help_text="exact, or a prefix ending in '.' such as topic.")
    object_type = django_filters.CharFilter(label="Object type")
    object_id = django_filters.CharFilter(label="Object id")
    object = django_filters.CharFilter(field_name="object_repr", lookup_expr="icontains", label="Object name")
    since = IsoDateTimeFilter(field_name="timestamp", lookup_expr="gte", label="From", widget=_DT)
    until = IsoDateTimeFilter(field_name="timestamp", lookup_expr="lt", label="Until", widget=_DT)
    request_id = django_filters.CharFilter(label="Request id")

    class Meta:
        model = AuditRecord
        fields = ["actor", "action", "object_type", "object_id", "object", "since", "until", "request_id"]

    def by_action(self, queryset, name, value):
        if value.endswith("."):
            return queryset.filter(action__startswith=value)
        return queryset.filter(action=value)
