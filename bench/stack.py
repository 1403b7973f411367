"""What a bench takes from the stack ./dev started (its env.sh names the services): the ZooKeeper, a database of
its own (made afresh as the owner role, migrated, Django set up on it; dropped at the end unless the bench keeps
it), and a scratch folder with the logs next to the stack's."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import django
import psycopg2
from django.core.management import call_command
from django.db import connections

from broker_core.secret_source import read_secret


def owner_connection():
    """An autocommit connection to the `postgres` database as the owner role (to create and drop databases)."""
    conn = psycopg2.connect(host=os.environ.get("SWITCHYARD_DB_HOST", "127.0.0.1"),
                            port=os.environ.get("SWITCHYARD_DB_PORT", "27100"),
                            user=os.environ.get("SWITCHYARD_DB_OWNER_USER", "switchyard_owner"), dbname="postgres",
                            password=read_secret("SWITCHYARD_DB_OWNER_PASSWORD"))
    conn.autocommit = True
    return conn


def recreate_database(name: str, drop_only: bool = False) -> None:
    conn = owner_connection()
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()


def drop_database(name: str) -> None:
    """Close this process's connections to it, then drop it."""
    if "DJANGO_SETTINGS_MODULE" in os.environ:
        connections.close_all()
    recreate_database(name, drop_only=True)


def use_database(name: str) -> dict[str, str]:
    """Make `name` afresh and point this process (and the processes it starts with the returned environment) at
    it as the owner role, which migrates it. Django is set up here; import models after this."""
    recreate_database(name)
    env = {"SWITCHYARD_DB_NAME": name, "SWITCHYARD_DB_ROLE": "owner"}  # the bench migrates its database
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    django.setup()
    call_command("migrate", verbosity=0)
    return env


def stack_zookeeper() -> str:
    """The stack's ZooKeeper connect string."""
    zk_connect = os.environ.get("SWITCHYARD_ZK")
    if not zk_connect:
        raise SystemExit("SWITCHYARD_ZK is not set: source the env.sh that ./dev writes into its state folder")
    return zk_connect


def scratch(prefix: str) -> tuple[Path, Path]:
    """A new scratch folder, and the logs folder (the stack's, when SWITCHYARD_STATE names it; else the scratch's)."""
    state = Path(tempfile.mkdtemp(prefix=prefix))
    logs = Path(os.environ.get("SWITCHYARD_STATE", state)) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return state, logs
