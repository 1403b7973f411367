"""A rebalance of a cluster's partitions over its brokers (docs/rebalance.md): its plan, how far it got and
what the worker read last. Only apps.rebalancing.actions writes these rows (and the runner's lease)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.clusters.models import Cluster
from apps.rebalancing.choices import ACTIVE_STATES, OPEN_STATES, Phase, RebalanceState
from control_plane.leases import LeasedRow


class Rebalance(LeasedRow):
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="rebalances")
    state = models.CharField(max_length=16, choices=RebalanceState.choices, default=RebalanceState.RUNNING,
                             db_index=True)
    brokers = models.JSONField(default=list, help_text="the brokers registered when it was planned")
    remove = models.JSONField(default=list, blank=True, help_text="the brokers it empties")
    steps = models.JSONField(default=list, help_text="the planned replica moves, in order")
    position = models.PositiveIntegerField(default=0, help_text="steps done (the index of the step under way)")
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.ADD)
    summary = models.CharField(max_length=300, blank=True, help_text="the progress in words")
    progress = models.JSONField(default=dict, blank=True, help_text="the figures the worker read last")
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="runs of the current step that ended in an error")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    requested_as = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster"], condition=Q(state__in=[s.value for s in OPEN_STATES]),
                                    name="rebalance_one_open_per_cluster"),
        ]

    def __str__(self) -> str:
        return f"rebalance #{self.pk} of {self.cluster.name} ({self.state})"

    @property
    def total(self) -> int:
        return len(self.steps)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    @property
    def current(self) -> dict | None:
        return self.steps[self.position] if self.position < len(self.steps) else None
