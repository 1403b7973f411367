"""Where the services that `./dev test` started live (read from the environment it exports)."""

from __future__ import annotations

import os
from pathlib import Path

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
