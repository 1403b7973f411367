"""Read a cluster's ZooKeeper live: reachable or not, and the broker nodes registered there; and the
control plane's ZooKeeper identity with the ACLs it writes (broker_core.cluster.zk_acl holds the rules).

Every call is bounded by SWITCHYARD_ZK_TIMEOUT; nothing here writes. The credential is read from the
environment at use (`read_secret`: a variable or a mode-600 file, never argv), so a rotated credential
file is picked up by the next client opened. Without one the control plane does not touch a cluster's
ZooKeeper: what it wrote there would be open to anyone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from apps.clusters.partitions import TopicPartitions, read_partitions, under_replicated
from broker_core.cluster.zk_acl import (
    BROKER_AUTH,
    BROKER_DIGEST,
    CONTROL_AUTH,
    AclPolicy,
    ZkCredential,
    ZkCredentialError,
    broker_acl_id,
    broker_previous_acl_id,
    control_credential,
    control_previous_credential,
)
from broker_core.layout import Layout
from broker_core.secret_source import SecretSourceError

log = logging.getLogger(__name__)


class ZooKeeperUnreachable(Exception):
    pass


class ZooKeeperCredentialsMissing(ZooKeeperUnreachable):
    """No usable ZooKeeper credential is configured: nothing can be read or written safely."""


@contextmanager
def _credential_errors() -> Iterator[None]:
    """A credential that cannot be read (bad file mode, malformed `user:password`) as ZooKeeperCredentialsMissing."""
    try:
        yield
    except (SecretSourceError, ZkCredentialError) as exc:
        raise ZooKeeperCredentialsMissing(str(exc)) from exc


def control_auth() -> ZkCredential:
    with _credential_errors():
        credential = control_credential()
    if credential is None:
        raise ZooKeeperCredentialsMissing(
            f"the control plane has no ZooKeeper credential: set {CONTROL_AUTH}_FILE to a mode-600 file holding "
            f"`user:password` (docs/security.md)")
    return credential


def control_auth_data() -> list[tuple[str, str]]:
    """What the control plane's sessions authenticate with: its credential, and during a rotation the former
    one too (so nodes still naming the former identity can be given the new ACLs)."""
    current = control_auth()
    with _credential_errors():
        previous = control_previous_credential()
    return current.auth_data + (previous.auth_data if previous else [])


def acl_policy() -> AclPolicy:
    with _credential_errors():
        previous_broker_id = broker_previous_acl_id()
        broker_id = broker_acl_id()
    if broker_id is None:
        raise ZooKeeperCredentialsMissing(
            f"the control plane does not know the brokers' ZooKeeper identity: set {BROKER_DIGEST} "
            f"(`user:<base64 sha1>`) or {BROKER_AUTH}_FILE (docs/security.md)")
    return AclPolicy(control_id=control_auth().acl_id, broker_id=broker_id, previous_broker_id=previous_broker_id)


@contextmanager
def zk_client(connect: str, timeout: float | None = None) -> Iterator[KazooClient]:
    """A started client for `connect` (host:port[,...][/chroot]); stopped on exit."""
    timeout = timeout or settings.SWITCHYARD_ZK_TIMEOUT
    client = KazooClient(hosts=connect, timeout=timeout, connection_retry={"max_tries": 1, "delay": 0.1},
                         command_retry={"max_tries": 0}, auth_data=control_auth_data())
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, Exception) as exc:  # kazoo raises several kinds when nothing answers
        client.close()
        raise ZooKeeperUnreachable(f"ZooKeeper at {connect} did not answer within {timeout:.0f}s: {exc}") from exc
    try:
        yield client
    finally:
        client.stop()
        client.close()


@dataclass
class BrokerNode:
    node_id: str
    host: str
    port: int
    metrics_port: int | None
    started_at: str | None
    version: str | None


@dataclass
class ClusterHealth:
    reachable: bool
    error: str = ""
    layout_version: int | None = None
    brokers: list[BrokerNode] = field(default_factory=list)
    partitions: list[TopicPartitions] = field(default_factory=list)  # the placed topics (issue 20)

    @property
    def under_replicated(self) -> int:
        return under_replicated(self.partitions)


def read_health(cluster, timeout: float | None = None) -> ClusterHealth:
    layout = Layout()
    try:
        with zk_client(cluster.zk_connect, timeout) as zk:
            chroot = cluster.zk_chroot
            meta = None
            try:
                data, _ = zk.get(chroot + layout.META)
                meta = json.loads(data or b"{}")
            except NoNodeError:
                pass
            brokers = []
            try:
                children = zk.get_children(chroot + layout.BROKERS)
            except NoNodeError:
                children = []
            for node_id in sorted(children):
                try:
                    data, _ = zk.get(f"{chroot}{layout.BROKERS}/{node_id}")
                except NoNodeError:
                    continue  # went away while we looked
                info = json.loads(data or b"{}")
                brokers.append(BrokerNode(node_id=node_id, host=info.get("host", "?"), port=info.get("port", 0),
                                          metrics_port=info.get("metrics_port"), started_at=info.get("started_at"),
                                          version=info.get("version")))
            placed = read_partitions(zk, chroot, {b.node_id for b in brokers})
            return ClusterHealth(reachable=True, layout_version=(meta or {}).get("layout_version"), brokers=brokers,
                                 partitions=placed)
    except ZooKeeperUnreachable as exc:
        return ClusterHealth(reachable=False, error=str(exc))
