"""What the control plane knows about ZooKeeper: each object's sync state and each reconcile run."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.clusters.models import Cluster
from control_plane.choices import text_choices

# route: /routes/<topic>, where the topic's clients send and subscribe
ObjectKind = text_choices("ObjectKind", "topic", "binding", "app", ("grant", "Producer grant"), "route")


class Placement(models.Model):
    """A cluster that holds a topic besides the one serving it, while the topic moves (docs/routing.md).

    The serving cluster (`Topic.cluster`) is where producers send; consumers subscribe there and on every
    placement with `consume`. Only apps.provisioning.placement writes these rows.
    """

    topic = models.ForeignKey("topics.Topic", on_delete=models.CASCADE, related_name="placements")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="placements")
    consume = models.BooleanField(default=False, help_text="Consumers subscribe on this cluster too.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["topic_id", "cluster_id"]
        constraints = [models.UniqueConstraint(fields=["topic", "cluster"], name="placement_unique_topic_cluster")]
        permissions = [("move_topic", "Change which clusters hold and serve a topic")]

    def __str__(self) -> str:
        return f"{self.topic_id}@{self.cluster_id}{' (consume)' if self.consume else ''}"


SyncStatus = text_choices("SyncStatus", "pending", "synced", "failed", "drifted")


class SyncState(models.Model):
    """One object on one cluster: the revision wanted and what was last read back from ZooKeeper.

    Only provisioning and reconciliation write it, and only from what they read in ZooKeeper.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="sync_states")
    kind = models.CharField(max_length=16, choices=ObjectKind.choices)
    object_id = models.BigIntegerField()
    path = models.CharField("ZooKeeper path", max_length=400,
                            help_text="Relative to the cluster's chroot, as in docs/zookeeper-layout.md.")
    desired_revision = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=SyncStatus.choices, default=SyncStatus.PENDING, db_index=True)
    zk_revision = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="The revision read back from ZooKeeper.")
    zk_version = models.IntegerField(null=True, blank=True, help_text="The znode's data version (stat.version).")
    landed_revision = models.PositiveIntegerField(
        null=True, blank=True, help_text="The last revision read back equal to what was wanted.")
    error = models.TextField(blank=True)
    problem = models.CharField(max_length=16, blank=True, help_text="missing | different, when drifted")
    diff = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name", "kind", "path"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "object_id", "cluster"], name="syncstate_unique_object_cluster"),
        ]
        indexes = [models.Index(fields=["cluster", "state"])]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{self.path} {self.state}"


class ReconcileRun(models.Model):
    """One comparison of every desired object of a cluster with ZooKeeper, and the repairs it made."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="reconcile_runs")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    source = models.CharField(max_length=16)
    repair = models.BooleanField(default=False)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    reachable = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    checked = models.PositiveIntegerField(default=0)
    missing = models.PositiveIntegerField(default=0)
    unexpected = models.PositiveIntegerField(default=0)
    different = models.PositiveIntegerField(default=0)
    acl_drift = models.PositiveIntegerField(default=0, help_text="nodes whose ACL is not the one the layout prescribes")
    repaired = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    items = models.JSONField(default=list, blank=True,
                             help_text="[{path, kind, object_id, problem, diff, repaired, error}]")

    class Meta:
        ordering = ["-started_at"]
        permissions = [("repair_drift", "Repair drift between the platform and ZooKeeper")]

    def __str__(self) -> str:
        return f"reconcile {self.cluster.name} at {self.started_at:%Y-%m-%d %H:%M:%S}"

    @property
    def drift_count(self) -> int:
        return self.missing + self.unexpected + self.different + self.acl_drift

    @property
    def unrepaired(self) -> int:
        """What the run left drifted: found and not repaired."""
        return sum(1 for item in self.items if not item.get("repaired"))
