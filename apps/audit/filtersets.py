import django_filters
from django import forms

from apps.audit.models import AuditRecord
from apps.audit.routine import routine_q
from control_plane.filters import IsoDateTimeFilter

_DT = forms.DateTimeInput(attrs={"type": "datetime-local"})


class AuditRecordFilterSet(django_filters.FilterSet):
    """Search the governance audit log by actor, object, action and time (web, API and CSV export).

    Routine events (apps.audit.routine) are left out unless `show_routine` is on; `matching` is the search with
    them, for counting what was left out."""

    actor = django_filters.CharFilter(field_name="actor_name", label="Actor")
    action = django_filters.CharFilter(method="by_action", label="Action",
                                       help_text="exact, or a prefix ending in '.' such as topic.")
    object_type = django_filters.CharFilter(label="Object type")
    object_id = django_filters.CharFilter(label="Object id")
    object = django_filters.CharFilter(field_name="object_repr", lookup_expr="icontains", label="Object name")
    since = IsoDateTimeFilter(field_name="timestamp", lookup_expr="gte", label="From", widget=_DT)
    until = IsoDateTimeFilter(field_name="timestamp", lookup_expr="lt", label="Until", widget=_DT)
    request_id = django_filters.CharFilter(label="Request id")
    show_routine = django_filters.BooleanFilter(
        method="with_routine", label="Show routine events", widget=forms.CheckboxInput,
        help_text="the sweeps' own records (back-check resolutions, move steps, landings), hidden by default")

    class Meta:
        model = AuditRecord
        fields = ["actor", "action", "object_type", "object_id", "object", "since", "until", "request_id",
                  "show_routine"]

    def by_action(self, queryset, name, value):
        if value.endswith("."):
            return queryset.filter(action__startswith=value)
        return queryset.filter(action=value)

    def with_routine(self, queryset, name, value):
        return queryset  # filter_queryset below leaves them out when off

    def filter_queryset(self, queryset):
        queryset = super().filter_queryset(queryset)
        return queryset if self.form.cleaned_data.get("show_routine") else queryset.exclude(routine_q())

    @property
    def matching(self):
        """The search with the routine events (of a valid filter set)."""
        return super().filter_queryset(self.queryset.all())
