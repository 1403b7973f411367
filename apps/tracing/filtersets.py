"""One filter set per model for the web search and the API (and their CSV exports)."""

import django_filters
from django import forms

from apps.clusters.models import Cluster
from apps.tracing.choices import TraceState
from apps.tracing.models import IndexRun, TracedMessage
from control_plane.filters import IsoDateTimeFilter

_DT = forms.DateTimeInput(attrs={"type": "datetime-local"})


def cluster_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in Cluster.objects.order_by("name").values_list("name", flat=True)]


class TracedMessageFilterSet(django_filters.FilterSet):
    """Find messages by message id, business id or key, or by topic + time range + final state; any of them on
    one cluster. Who may see which messages is the view's business (queries.visible_messages)."""

    message_id = django_filters.CharFilter(label="Message id")
    business_id = django_filters.CharFilter(label="Business id")
    key = django_filters.CharFilter(label="Key")
    topic = django_filters.CharFilter(label="Topic")
    cluster = django_filters.ChoiceFilter(choices=cluster_choices, label="Cluster", empty_label="any cluster")
    since = IsoDateTimeFilter(field_name="first_at", lookup_expr="gte", label="From", widget=_DT)
    until = IsoDateTimeFilter(field_name="first_at", lookup_expr="lt", label="Until", widget=_DT)
    state = django_filters.ChoiceFilter(choices=TraceState.choices, method="in_state", label="Final state",
                                        help_text="in any of its groups")

    class Meta:
        model = TracedMessage
        fields = ["message_id", "business_id", "key", "topic", "cluster", "since", "until", "state"]

    def in_state(self, queryset, name, value):
        return queryset.filter(final_states__contains=[value])

    @property
    def has_criteria(self) -> bool:
        return self.is_bound and any(self.data.get(f) for f in self.Meta.fields)


class IndexRunFilterSet(django_filters.FilterSet):
    class Meta:
        model = IndexRun
        fields = ["state", "trigger"]
