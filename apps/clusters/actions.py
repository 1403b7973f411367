"""Writes to clusters: atomic, permission-checked, audited."""

from __future__ import annotations

from django.db import transaction

from apps.audit.recorder import record
from apps.audit.snapshot import snapshot
from apps.clusters.models import Cluster
from control_plane.errors import require_perm

EDITABLE_FIELDS = ("name", "environment", "region", "zk_connect", "zk_chroot", "storage_level",
                   "description", "status", "repair_drift",
                   "backcheck_allow_private", "default_partitions", "default_replication_factor", "min_insync")


@transaction.atomic
def create_cluster(*, actor, **fields) -> Cluster:
    require_perm(actor, "clusters.add_cluster")
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise TypeError(f"unknown cluster fields: {sorted(unknown)}")
    cluster = Cluster(**fields)
    cluster.full_clean()
    cluster.save()
    record(actor=actor, action="cluster.create", obj=cluster, after=snapshot(cluster))
    return cluster


@transaction.atomic
def update_cluster(*, actor, cluster: Cluster, **changes) -> Cluster:
    require_perm(actor, "clusters.change_cluster")
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise TypeError(f"unknown cluster fields: {sorted(unknown)}")
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    before = snapshot(cluster)
    for key, value in changes.items():
        setattr(cluster, key, value)
    cluster.full_clean()
    cluster.save()
    record(actor=actor, action="cluster.update", obj=cluster, before=before, after=snapshot(cluster))
    return cluster

