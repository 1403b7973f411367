"""Fixtures of the governance tests: a team with its people, clusters on the test ZooKeeper, a real
Celery worker process on the test database, and helpers to read ZooKeeper and wait for a state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout: float = 30.0, what: str = "condition", interval: float = 0.2):
    """Poll until predicate() is truthy; returns its value. A bound, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:.0f}s (last value {value!r})")
        time.sleep(interval)


@pytest.fixture
def people(make_user):
    """The cast: payments owns topics; logistics consumes them."""
    from types import SimpleNamespace

    return SimpleNamespace(
        dev=make_user("dev-pay", "developer", team="payments"),
        lead=make_user("lead-pay", "approver", team="payments"),
        sre=make_user("sre-1", "sre"),
        auditor=make_user("audit-1", "auditor"),
        consumer=make_user("dev-log", "developer", team="logistics"),
        lead_log=make_user("lead-log", "approver", team="logistics"),
        admin=make_user("root", "admin", superuser=True),
    )


@pytest.fixture
def zk(zk_connect):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_connect, timeout=5)
    client.start(timeout=5)
    yield client
    client.stop()
    client.close()


def read_node(zk, path: str):
    import json

    from kazoo.exceptions import NoNodeError

    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    return json.loads(data)


@pytest.fixture
def make_cluster(people, zk_connect, zk_chroot):
    from apps.clusters import actions

    def make(name="dev-a", environment="dev", chroot_suffix=None, connect=None, storage_level="file"):
        return actions.create_cluster(actor=people.admin, name=name, environment=environment, region="local",
                                      zk_connect=connect or zk_connect,
                                      zk_chroot=f"{zk_chroot}/{chroot_suffix or name}",
                                      storage_level=storage_level)

    return make


TOPIC = {
    "name": "payments.order-paid", "environment": "dev", "message_types": ["created", "paid"],
    "expected_peak_mps": 500, "max_message_bytes": 8192, "retention_hours": 48, "storage_level": "file",
    "transactional": False, "ordered": False, "description": "Orders that were paid", "reason": "Billing needs it",
}


@pytest.fixture
def topic_fields(people):
    """make(cluster, **overrides) → keyword arguments for create_topic_application."""
    from apps.accounts.models import Team

    def make(cluster, **overrides):
        return {**TOPIC, "team": Team.objects.get(name="payments"), "cluster": cluster,
                "environment": cluster.environment, **overrides}

    return make


@pytest.fixture
def approved_topic(people, topic_fields):
    """An approved, provisioned-or-not topic on the given cluster (through the actions)."""
    from apps.topics import actions

    def make(cluster, **overrides):
        application = actions.create_topic_application(actor=people.dev, **topic_fields(cluster, **overrides))
        application = actions.approve_topic_application(actor=people.lead, application=application, comment="ok")
        if cluster.environment == "prod":
            application = actions.approve_topic_application(actor=people.sre, application=application)
        return application.topic

    return make


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker):
    """A real `celery worker --pool=solo` process on the test database, the test Redis and ZooKeeper."""
    from django.db import connection

    from control_plane.celery import app
    from tests.support.stack import state_dir

    with django_db_blocker.unblock():
        test_db = connection.settings_dict["NAME"]
    app.control.purge()  # nothing left over from an earlier run
    log_path = state_dir() / "logs" / "gov-celery-worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SWITCHYARD_DB_NAME": test_db, "SWITCHYARD_PROVISION_BACKOFF_BASE": "0.5",
           "SWITCHYARD_PROVISION_BACKOFF_MAX": "2", "SWITCHYARD_ZK_TIMEOUT": "2"}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "control_plane", "worker", "--pool=solo", "-l", "info",
             "-n", f"gov-test-{os.getpid()}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: proc.poll() is not None or _worker_ready(app), 60, "the Celery worker to start")
        if proc.poll() is not None:
            raise RuntimeError(f"the Celery worker exited with {proc.returncode}; see {log_path}")
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _worker_ready(app) -> bool:
    try:
        return bool(app.control.ping(timeout=0.5))
    except Exception:
        return False


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Test users log in with a known password; the production hasher's million rounds only cost time here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
