"""Compare every object a cluster should hold with what its ZooKeeper holds; repair on request.

    missing     desired, absent from ZooKeeper
    unexpected  in ZooKeeper under /topics, /bindings, /apps, /grants or /routes, not desired (e.g. made by hand)
    different   both, with other content (the item carries a field-by-field diff)
    acl         a node of the chroot (the chroot itself, /meta, /brokers, every container and object) whose
                ACL is not the one broker_core.cluster.zk_acl prescribes: open to writes, or to reading secret hashes

Reads are pipelined (zk.Session.read_many) so ten thousand bindings compare in about a second.
Repairs write the desired document (or delete an unexpected node, or set the ACL) and are audited one by
one. Drift is an alert (docs/security.md): drift not seen open in the cluster's previous run gets an audit
record, the cluster page warns while the last run left drift, `/metrics` exports the count
(switchyard_zookeeper_drift_objects), and a cluster whose `repair_drift` is on is repaired at once.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from apps.audit.context import current
from apps.clusters.models import Cluster
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.provisioning import actions
from apps.provisioning.desired import META, Desired, desired_for_cluster
from apps.provisioning.models import ReconcileRun, SyncState, SyncStatus
from apps.provisioning.status import decode_node, diff_docs, observe
from apps.provisioning.zk import Node, Session
from broker_core.cluster.zk_acl import describe
from broker_core.layout import LAYOUT
from control_plane.errors import require_perm


def read_cluster(session: Session, containers: list[str] | None = None) -> dict[str, Node]:
    """Every object node under the cluster's chroot, by relative path (containers and /brokers left out).
    The container paths seen are appended to `containers` when given."""
    paths = [LAYOUT.META]
    paths += [LAYOUT.topic(t) for t in session.children(LAYOUT.TOPICS)]
    paths += [LAYOUT.app(a) for a in session.children(LAYOUT.APPS)]
    paths += [LAYOUT.route(t) for t in session.children(LAYOUT.ROUTES)]
    for container, leaf in ((LAYOUT.BINDINGS, LAYOUT.binding), (LAYOUT.GRANTS, LAYOUT.grant)):
        topics = session.children(container)
        kids = session.children_many([f"{container}/{t}" for t in topics])
        for t in topics:
            paths += [leaf(t, child) for child in kids[f"{container}/{t}"]]
        if containers is not None:
            containers += [f"{container}/{t}" for t in topics]
    nodes = session.read_many(paths)
    return {p: n for p, n in nodes.items() if n is not None}


def acl_drift(session: Session, object_paths: list[str], containers: list[str]) -> list[dict]:
    """Items for every node (chroot, /brokers, containers, objects; not the brokers' own registrations) whose
    ACL differs from the one the layout prescribes."""
    paths = ["", LAYOUT.BROKERS, LAYOUT.TOPICS, LAYOUT.BINDINGS, LAYOUT.APPS, LAYOUT.GRANTS, LAYOUT.ROUTES, *containers,
             *object_paths]
    found = session.read_acls(sorted(set(paths)))
    items = []
    for path, acl in sorted(found.items()):
        if acl is None or session.policy.matches(path, acl):
            continue  # absent (a container not made yet) or as prescribed
        items.append({"path": path or "/", "kind": "acl", "object_id": None, "problem": "acl", "sync_state": "",
                      "diff": {"acl": {"desired": describe(session.policy.for_path(path)), "actual": describe(acl)}},
                      "repaired": False, "error": ""})
    return items


def _kind_of_path(path: str) -> str:
    top = path.split("/")[1]
    return {"topics": "topic", "bindings": "binding", "apps": "app", "grants": "grant", "routes": "route",
            "meta": META}.get(top, top)


def reconcile(cluster: Cluster, *, actor, repair: bool = False) -> ReconcileRun:
    """Compare (and, with repair, fix) one cluster. Always returns a saved run, reachable or not."""
    require_perm(actor, "provisioning.repair_drift" if repair else "provisioning.add_reconcilerun")
    started = timezone.now()
    t0 = time.monotonic()
    run = ReconcileRun(cluster=cluster, requested_by=actor if getattr(actor, "pk", None) else None,
                       source=current().source, repair=repair, started_at=started)
    desired = desired_for_cluster(cluster)
    try:
        session = Session(cluster.zk_connect, cluster.zk_chroot)
        containers: list[str] = []
        actual = read_cluster(session, containers)
        acl_items = acl_drift(session, list(actual), containers)
    except ZooKeeperUnreachable as exc:
        run.reachable, run.error = False, str(exc)
        run.checked = len(desired)
        return _finish(run, t0)

    records = {(r.kind, r.object_id): r for r in SyncState.objects.filter(cluster=cluster)}
    items, observed = [], []
    for path, want in desired.items():
        node = actual.get(path)
        obs = observe(want, node, records.get((want.kind, want.object_id)))
        observed.append((want, obs))
        if obs.state == SyncStatus.SYNCED:
            continue
        items.append({"path": path, "kind": str(want.kind), "object_id": want.object_id, "problem": obs.problem,
                      "sync_state": str(obs.state), "diff": obs.diff, "repaired": False, "error": ""})
    for path in sorted(set(actual) - set(desired)):
        items.append({"path": path, "kind": _kind_of_path(path), "object_id": None, "problem": "unexpected",
                      "sync_state": "", "diff": diff_docs(None, decode_node(actual[path])), "repaired": False,
                      "error": ""})
    unexpected = {i["path"] for i in items if i["problem"] == "unexpected"}
    items += [i for i in acl_items if i["path"] not in unexpected]  # an unexpected node goes as a whole
    actions.record_observations(cluster, observed, actor=actor, known=records)
    SyncState.objects.filter(cluster=cluster).update(checked_at=timezone.now())
    actions.record_drift_alert(cluster, items, previous=_last_open_drift(cluster), repair=repair, actor=actor)

    if repair and items:
        _repair(session, cluster, desired, actual, items, actor)

    run.checked = len(desired)
    run.missing = sum(1 for i in items if i["problem"] == "missing")
    run.unexpected = sum(1 for i in items if i["problem"] == "unexpected")
    run.different = sum(1 for i in items if i["problem"] == "different")
    run.acl_drift = sum(1 for i in items if i["problem"] == "acl")
    run.repaired = sum(1 for i in items if i["repaired"])
    run.items = items
    return _finish(run, t0)


def _repair(session: Session, cluster, desired: dict[str, Desired], actual: dict[str, Node], items: list[dict],
            actor) -> None:
    session.ensure_skeleton()
    writes = {i["path"]: desired[i["path"]].data for i in items if i["problem"] in ("missing", "different")}
    errors = session.put_many(writes) if writes else {}
    acl_paths = [_relative(i["path"]) for i in items if i["problem"] == "acl"]
    errors.update({(p or "/"): e for p, e in (session.set_acls(acl_paths) if acl_paths else {}).items()})
    for item in items:
        path = item["path"]
        try:
            if item["problem"] == "acl":
                if errors.get(path) is not None:
                    raise errors[path]
                item["repaired"] = True
                actions.record_repair(actor=actor, cluster=cluster, path=path, problem="acl", kind=None,
                                      object_id=None, before={"acl": item["diff"]["acl"]["actual"]},
                                      after={"acl": item["diff"]["acl"]["desired"]})
                continue
            if item["problem"] == "unexpected":
                session.delete(path)
            elif errors.get(path) is not None:
                raise errors[path]
        except ZooKeeperUnreachable:
            raise
        except Exception as exc:
            item["error"] = f"{type(exc).__name__}: {exc}"
            continue
        item["repaired"] = True
        want = desired.get(path)
        actions.record_repair(actor=actor, cluster=cluster, path=path, problem=item["problem"],
                              kind=want.kind if want and want.kind != META else None,
                              object_id=want.object_id if want and want.kind != META else None,
                              before=decode_node(actual.get(path)), after=want.doc if want else None)
    repaired = [desired[i["path"]] for i in items if i["repaired"] and i["path"] in desired]
    if repaired:
        nodes = session.read_many([d.path for d in repaired])
        records = {(r.kind, r.object_id): r for r in SyncState.objects.filter(cluster=cluster)}
        actions.record_observations(cluster, [(d, observe(d, nodes[d.path], records.get((d.kind, d.object_id))))
                                              for d in repaired], actor=actor, audit_landing=False)


def _relative(item_path: str) -> str:
    return "" if item_path == "/" else item_path


def latest_run(cluster: Cluster) -> ReconcileRun | None:
    """The cluster's last reconcile that reached its ZooKeeper: what is known of its drift."""
    return ReconcileRun.objects.filter(cluster=cluster, reachable=True).order_by("-started_at", "-pk").first()


def _last_open_drift(cluster: Cluster) -> set[tuple[str, str]]:
    """(path, problem) the cluster's previous reachable run found and left unrepaired."""
    last = latest_run(cluster)
    if last is None:
        return set()
    return {(i["path"], i["problem"]) for i in last.items if not i.get("repaired")}


def _finish(run: ReconcileRun, t0: float) -> ReconcileRun:
    run.finished_at = timezone.now()
    run.duration_ms = int((time.monotonic() - t0) * 1000)
    run.save()
    return run


def stale_units(cluster: Cluster, older_than: timedelta) -> list[tuple[str, int]]:
    """Objects still waiting for their revision with no push in flight (failed, or quiet for a while)."""
    cutoff = timezone.now() - older_than
    waiting = SyncState.objects.filter(cluster=cluster, state__in=[SyncStatus.PENDING, SyncStatus.FAILED])
    stale = waiting.filter(state=SyncStatus.FAILED) | waiting.filter(last_attempt_at__lt=cutoff) | \
        waiting.filter(last_attempt_at__isnull=True, updated_at__lt=cutoff)
    return [(s.kind, s.object_id) for s in stale.order_by("kind", "object_id")]
