"""Writes to clusters: atomic, permission-checked, audited."""

from __future__ import annotations

from django.apps import apps as django_apps
from django.core.exceptions import ValidationError
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
    replicas_before = cluster.default_replication_factor
    for key, value in changes.items():
        setattr(cluster, key, value)
    cluster.full_clean()
    if cluster.default_replication_factor > 1 and cluster.default_replication_factor != replicas_before:
        _refuse_replicating_transactional_topics(cluster)
    cluster.save()
    record(actor=actor, action="cluster.update", obj=cluster, before=before, after=snapshot(cluster))
    return cluster


def _refuse_replicating_transactional_topics(cluster: Cluster) -> None:
    """A cluster placing topics with 2+ replicas by default would give its transactional topics that follow the
    default 2+ replicas, whose brokers refuse transaction messages (not replicated yet: docs/transactions.md): the
    change is refused while such topics are there, naming them. (The topics app is looked up by name: it imports
    this one.)"""
    topic_model = django_apps.get_model("topics", "Topic")
    names = list(topic_model.objects.filter(cluster=cluster, transactional=True, replication_factor__isnull=True)
                 .exclude(status="deleted").order_by("name").values_list("name", flat=True)[:11])
    if names:
        shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise ValidationError({"default_replication_factor": [
            f"Cluster {cluster.name} holds transactional topics that follow its default ({shown}); their brokers "
            "refuse transaction messages on topics of 2 or more replicas (transaction messages are not replicated "
            "yet). Keep the default at 1, or move or retire those topics first."]})
