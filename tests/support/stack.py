"""Where the services that `./dev test` started live (read from the environment it exports)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kazoo.client import KazooClient

from broker_core.cluster.zk_acl import broker_credential
from devstack.services import Ports


def zk_connect() -> str:
    value = os.environ.get("SWITCHYARD_ZK")
    if not value:
        raise RuntimeError("SWITCHYARD_ZK is not set: run the tests through `./dev test`, which starts ZooKeeper")
    return value


def state_dir() -> Path:
    return Path(os.environ.get("SWITCHYARD_STATE", Path(__file__).resolve().parents[2] / ".devstack" / "test"))


def ports() -> Ports:
    return Ports(int(os.environ.get("SWITCHYARD_PORT_BASE", "27200")))


def monitoring_token() -> str:
    """The token Prometheus presents to the control plane's /metrics (the settings read it like this)."""
    from django.conf import settings

    return settings.SWITCHYARD_MONITORING_TOKEN


def control_zk_client(hosts: str, timeout: float = 10.0):
    """A kazoo client (not started) that authenticates as the control plane: full rights on what it wrote."""
    from kazoo.client import KazooClient

    from broker_core.cluster.zk_acl import control_credential

    return KazooClient(hosts=hosts, timeout=timeout, auth_data=control_credential().auth_data)


def zk_acl_policy():
    """The ACLs the control plane writes, for this test run's two identities."""
    from broker_core.cluster.zk_acl import AclPolicy, broker_acl_id, control_credential

    return AclPolicy(control_id=control_credential().acl_id, broker_id=broker_acl_id())


def broker_environment() -> dict[str, str]:
    """The environment of a broker process: the test run's, without the control plane's ZooKeeper credential."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_ZK_CONTROL_AUTH")}


@contextmanager
def outsider_clients(hosts: str) -> Iterator[tuple[KazooClient, KazooClient]]:
    """An anonymous ZooKeeper client and one holding the brokers' credential: the two that must not write."""
    anonymous = KazooClient(hosts=hosts, timeout=10)
    as_broker = KazooClient(hosts=hosts, timeout=10, auth_data=broker_credential().auth_data)
    for client in (anonymous, as_broker):
        client.start(timeout=15)
    try:
        yield anonymous, as_broker
    finally:
        for client in (anonymous, as_broker):
            client.stop()
            client.close()
