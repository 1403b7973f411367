"""Secure a cluster's ZooKeeper that was made without ACLs: give every node of its chroot the ACL the
layout prescribes (broker_core.cluster.zk_acl, docs/security.md). Idempotent: a node already right is left alone.

The walk is breadth-first, one pipelined round trip per level; ACLs are set top-down (the control plane
keeps every right on what it secured, so it can still walk below). A node whose ACL already shuts the
control plane out cannot be fixed from here: it is reported, and needs ZooKeeper's super user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.exceptions import NoAuthError, NoNodeError

from apps.provisioning import actions
from apps.provisioning.zk import Session
from control_plane.errors import require_perm

LEVEL_BATCH = 500


@dataclass
class SecureReport:
    cluster: str
    nodes: int = 0
    changed: int = 0
    already: int = 0
    failed: list[str] = field(default_factory=list)


def secure_cluster(cluster, *, actor, progress: Callable[[SecureReport, int], None] | None = None,
                   session: Session | None = None) -> SecureReport:
    """Apply the ACLs to every node under the cluster's chroot (creating the chroot and /brokers when
    missing); audited as `zookeeper.secure` when anything changed or failed."""
    require_perm(actor, "provisioning.repair_drift")
    session = session or Session(cluster.zk_connect, cluster.zk_chroot)
    session.ensure_skeleton()
    report = SecureReport(cluster.name)
    level = [""]
    depth = 0
    while level:
        for start in range(0, len(level), LEVEL_BATCH):
            _secure_paths(session, level[start:start + LEVEL_BATCH], report)
        if progress is not None:
            progress(report, depth)
        level = _children(session, level)
        depth += 1
    if report.changed or report.failed:
        actions.record_secure(actor=actor, cluster=cluster, nodes=report.nodes, changed=report.changed,
                              failed=report.failed)
    return report


def _secure_paths(session: Session, paths: list[str], report: SecureReport) -> None:
    acls = session.read_acls(paths)
    wrong = []
    for path, acl in acls.items():
        if acl is None:
            continue  # went away meanwhile (a broker's registration, say)
        report.nodes += 1
        if session.policy.matches(path, acl):
            report.already += 1
        else:
            wrong.append(path)
    for path, error in session.set_acls(wrong).items():
        if error is None:
            report.changed += 1
        elif isinstance(error, NoAuthError):
            report.failed.append(f"{path or '/'}: its ACL shuts the control plane out (fix it as ZooKeeper's "
                                 f"super user, then run this again)")
        elif not isinstance(error, NoNodeError):
            report.failed.append(f"{path or '/'}: {error}")


def _children(session: Session, paths: list[str]) -> list[str]:
    pending = [(p, session.zk.get_children_async(session.abs(p))) for p in paths]
    out = []
    for path, result in pending:
        try:
            out += [f"{path}/{child}" for child in sorted(session._wait(result))]
        except NoNodeError:
            continue
        except NoAuthError:
            continue  # counted as failed when its ACL was read
    return out
