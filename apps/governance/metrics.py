"""Prometheus figures of the applications, served at the control plane's /metrics (control_plane.metrics)."""

from __future__ import annotations

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from apps.bindings.models import BindingApplication, GrantApplication
from apps.governance.workflow import State
from apps.lifecycle.models import LifecycleApplication
from apps.topics.models import TopicApplication


def application_models():
    return {"topic": TopicApplication, "binding": BindingApplication, "grant": GrantApplication,
            "lifecycle": LifecycleApplication}


class ApplicationCollector:
    """Applications by kind and state; the provisioning lag: how long the oldest approved application of each
    kind has waited to be active (approved or provisioning, since its decision; 0 when none waits)."""

    def collect(self):
        by_state = GaugeMetricFamily("switchyard_applications", "Applications by kind and state",
                                     labels=["kind", "state"])
        lag = GaugeMetricFamily("switchyard_provisioning_lag_seconds", "Age of the oldest approved application "
                                "not provisioned yet (since its approval)", labels=["kind"])
        waiting = GaugeMetricFamily("switchyard_provisioning_waiting", "Approved applications not provisioned yet",
                                    labels=["kind"])
        now = timezone.now()
        for kind, model in application_models().items():
            counts = dict(model.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
            for state in State.values:
                by_state.add_metric([kind, state], counts.get(state, 0))
            pending = model.objects.filter(state__in=[State.APPROVED, State.PROVISIONING])
            oldest = pending.aggregate(oldest=Min("decided_at"))["oldest"]
            lag.add_metric([kind], max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
            waiting.add_metric([kind], counts.get(State.APPROVED, 0) + counts.get(State.PROVISIONING, 0))
        yield by_state
        yield lag
        yield waiting
