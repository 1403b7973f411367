"""Sync state from what ZooKeeper holds: compare a node read back with the desired document.

    synced   the node equals the desired document (its revision is the version shown)
    pending  the desired revision has not landed yet (not written, or ZooKeeper unreachable)
    failed   provisioning gave up on it; the error says why (a re-drive or repair can still land it)
    drifted  it had landed, and ZooKeeper no longer holds it as wanted (missing or different)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import reduce
from operator import or_

from django.db.models import Q
from django.utils import timezone

from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.governance.workflow import MATERIALIZED
from apps.provisioning.desired import Desired, desired_one, load
from apps.provisioning.models import SyncState, SyncStatus
from apps.provisioning.units import units_of
from apps.provisioning.zk import Node, Session


def decode_node(node: Node | None) -> dict | None:
    if node is None:
        return None
    try:
        doc = json.loads(node.data) if node.data else {}
    except ValueError:
        return {"<unreadable>": node.data[:200].decode("utf-8", "replace")}
    return doc if isinstance(doc, dict) else {"<not an object>": doc}


def _flatten(doc: dict | None, prefix: str = "") -> dict:
    out = {}
    for key, value in (doc or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def diff_docs(desired: dict | None, actual: dict | None) -> dict:
    """Field by field (nested fields dotted): {"ttl_s": {"desired": 60, "actual": 30}}; only what differs."""
    want, have = _flatten(desired), _flatten(actual)
    return {k: {"desired": want.get(k), "actual": have.get(k)}
            for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k) or (k in want) != (k in have)}


@dataclass
class Observation:
    state: str
    zk_revision: int | None = None
    zk_version: int | None = None
    problem: str = ""
    diff: dict = field(default_factory=dict)


def observe(desired: Desired, node: Node | None, record: SyncState | None) -> Observation:
    actual = decode_node(node)
    zk_revision = actual.get("revision") if isinstance(actual, dict) and isinstance(actual.get("revision"), int) \
        else None
    version = node.version if node is not None else None
    if node is not None and node.data == desired.data:
        return Observation(SyncStatus.SYNCED, zk_revision, version)
    problem = "missing" if node is None else "different"
    diff = diff_docs(desired.doc, actual)
    if record is not None and record.landed_revision == desired.revision:
        return Observation(SyncStatus.DRIFTED, zk_revision, version, problem, diff)
    if record is not None and record.state == SyncStatus.FAILED:
        return Observation(SyncStatus.FAILED, zk_revision, version, problem, diff)
    return Observation(SyncStatus.PENDING, zk_revision, version, problem, diff)


@dataclass
class LiveStatus:
    """One object's sync state as read from ZooKeeper just now (or why it could not be read)."""

    kind: str
    object_id: int
    cluster: str
    path: str
    state: str
    desired_revision: int
    zk_revision: int | None
    zk_version: int | None
    problem: str
    diff: dict
    error: str
    live: bool
    attempts: int
    last_attempt_at: str | None
    checked_at: str | None

    def as_dict(self) -> dict:
        return asdict(self)


def _from_record(record: SyncState, state: str, error: str) -> LiveStatus:
    return LiveStatus(
        kind=record.kind, object_id=record.object_id, cluster=record.cluster.name, path=record.path, state=state,
        desired_revision=record.desired_revision, zk_revision=record.zk_revision, zk_version=record.zk_version,
        problem=record.problem, diff=record.diff, error=error, live=False, attempts=record.attempts,
        last_attempt_at=record.last_attempt_at.isoformat() if record.last_attempt_at else None,
        checked_at=record.checked_at.isoformat() if record.checked_at else None,
    )


def live_statuses(records: list[SyncState]) -> list[LiveStatus]:
    """Read each record's node now. Unreachable ZooKeeper: pending/failed stay as recorded, with the
    error; what was synced or drifted becomes "unknown" (the platform does not assume)."""
    by_cluster: dict[int, list[SyncState]] = {}
    for r in records:
        by_cluster.setdefault(r.cluster_id, []).append(r)
    out: dict[int, LiveStatus] = {}
    for items in by_cluster.values():
        cluster = items[0].cluster
        try:
            session = Session(cluster.zk_connect, cluster.zk_chroot)
            nodes = session.read_many([r.path for r in items])
        except ZooKeeperUnreachable as exc:
            for r in items:
                state = r.state if r.state in (SyncStatus.PENDING, SyncStatus.FAILED) else "unknown"
                out[r.pk] = _from_record(r, state, f"{exc}" + (f" (last error: {r.error})" if r.error else ""))
            continue
        now = timezone.now().isoformat()
        for r in items:
            obj = load(r.kind, r.object_id)
            if obj is None:
                out[r.pk] = _from_record(r, "retired", "")
                continue
            desired = desired_one(r.kind, obj)
            obs = observe(desired, nodes[r.path], r)
            status = _from_record(r, obs.state, r.error if obs.state in (SyncStatus.PENDING, SyncStatus.FAILED)
                                  else "")
            status.zk_revision, status.zk_version, status.problem, status.diff = (
                obs.zk_revision, obs.zk_version, obs.problem, obs.diff)
            status.desired_revision, status.live, status.checked_at = desired.revision, True, now
            out[r.pk] = status
    return [out[r.pk] for r in records]


def live_status_of(kind: str, obj) -> list[LiveStatus]:
    records = list(SyncState.objects.filter(kind=kind, object_id=obj.pk).select_related("cluster"))
    return live_statuses(records)


def recorded_sync(applications) -> dict[tuple[str, int], list[SyncState]]:
    """The recorded sync state of what each application put into ZooKeeper, keyed by (kind, application
    pk), in the order the objects are written: one query for any number of applications."""
    # (cluster id or None for every cluster, units) per application
    wanted: dict[tuple[str, int], tuple[int | None, list[tuple[str, int]]]] = {}
    for a in applications:
        if a.state not in MATERIALIZED:
            continue
        if hasattr(a, "sync_units"):  # an application acting on something that exists, wherever it is held
            wanted[(a.kind, a.pk)] = (None, a.sync_units())
        elif getattr(a, f"{a.kind}_id") is not None:
            cluster_id = a.cluster_id if a.kind == "topic" else a.topic.cluster_id
            wanted[(a.kind, a.pk)] = (cluster_id, units_of(a))
    if not wanted:
        return {}
    terms = [Q(kind=k, object_id=i, **({"cluster_id": c} if c else {})) for c, units in wanted.values()
             for k, i in units]
    found: dict[tuple[str, int], list[SyncState]] = {}
    for r in SyncState.objects.filter(reduce(or_, terms)).select_related("cluster").order_by("cluster__name"):
        found.setdefault((r.kind, r.object_id), []).append(r)
    return {key: [r for k, i in units for r in found.get((k, i), []) if c is None or r.cluster_id == c]
            for key, (c, units) in wanted.items()}
