import django_filters

from apps.governance.api import ApplicationFilterSet, ApplicationViewSet
from apps.lifecycle.api.serializers import LifecycleApplicationSerializer
from apps.lifecycle.choices import Operation, Target
from apps.lifecycle.models import LifecycleApplication
from apps.lifecycle.policy import RULE_SETS


class LifecycleApplicationFilterSet(ApplicationFilterSet):
    topic = django_filters.CharFilter(field_name="topic__name")
    app = django_filters.CharFilter(field_name="app__app_id")
    operation = django_filters.ChoiceFilter(choices=Operation.choices)
    target_kind = django_filters.ChoiceFilter(choices=Target.choices)

    class Meta:
        model = LifecycleApplication
        fields = ["state", "operation", "target_kind", "topic", "app", "applicant"]


class LifecycleApplicationViewSet(ApplicationViewSet):
    """Change or retire a topic, change or remove a binding, revoke a producer grant, deactivate or reactivate an
    app: through policy and approval like a new one. `rules/?for=topic-change` lists one rule set."""

    queryset = LifecycleApplication.objects.select_related(
        "team", "topic__cluster", "topic__team", "binding__topic", "grant__topic", "grant__app", "app",
        "applicant").prefetch_related("decisions__actor")
    serializer_class = LifecycleApplicationSerializer
    filterset_class = LifecycleApplicationFilterSet
    search_fields = ["reason"]
    ordering_fields = ["created_at", "submitted_at", "number"]

    def rules_key(self, request) -> str:
        key = request.query_params.get("for", "")
        return key if key in RULE_SETS else "lifecycle"
