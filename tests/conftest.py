"""Fixtures shared by every test: users with roles, API clients, ZooKeeper chroots, the browser."""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
# The brokers' admin token: `./dev test` exports the path of its stack's token file
# (SWITCHYARD_BROKER_ADMIN_TOKEN_FILE, read by the settings and the brokers alike); a bare pytest run gets this
# one (brokers started by the tests inherit the environment, and so does the Celery worker).
if not os.environ.get("SWITCHYARD_BROKER_ADMIN_TOKEN_FILE"):
    os.environ.setdefault("SWITCHYARD_BROKER_ADMIN_TOKEN", "switchyard-test-admin-token")
# ZooKeeper's digest credentials (docs/security.md): `./dev test` hands over files; a bare pytest run gets these.
for _name, _value in (("SWITCHYARD_ZK_CONTROL_AUTH", "switchyard-control:test-control-password-0123456789"),
                      ("SWITCHYARD_ZK_BROKER_AUTH", "switchyard-broker:test-broker-password-0123456789")):
    if not os.environ.get(f"{_name}_FILE"):
        os.environ.setdefault(_name, _value)
# The monitoring token (/metrics, /alerts/notify): `./dev test` hands over a file; a bare pytest run gets this one.
if not os.environ.get("SWITCHYARD_MONITORING_TOKEN_FILE"):
    os.environ.setdefault("SWITCHYARD_MONITORING_TOKEN", "switchyard-test-monitoring-token-" + uuid.uuid4().hex)
# The control plane refuses to start without a secret key outside DEBUG; `./dev test` hands it a key file.
if not os.environ.get("SWITCHYARD_SECRET_KEY_FILE"):
    os.environ.setdefault("SWITCHYARD_SECRET_KEY", "switchyard-tests-only-" + uuid.uuid4().hex + uuid.uuid4().hex)

TEST_PASSWORD = "pw-for-tests-1"


def pytest_configure(config):
    _flush_again_after_a_deadlock()


# What a test run beside the others (devstack/testrun.py) may not use: the test database and the Celery worker on it
# belong to the other process, which creates and flushes them.
CONTROL_PLANE_FIXTURES = {"db", "transactional_db", "django_db_setup", "celery_worker", "live_server"}


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("SWITCHYARD_TEST_BESIDE"):
        return
    using = [f"{item.nodeid} ({', '.join(sorted(used))})"
             for item in items if (used := CONTROL_PLANE_FIXTURES.intersection(item.fixturenames))]
    if using:
        raise pytest.UsageError("these tests run beside the others (devstack/testrun.py BESIDE) but use the test "
                                "database or the Celery worker; move them out of BESIDE or drop the fixture:\n  "
                                + "\n  ".join(using))


def _flush_again_after_a_deadlock() -> None:
    """A transactional test's database flush (TRUNCATE of every table, one lock after another) can deadlock with
    the session's Celery worker still finishing a task the test started (it reads one table and wants another the
    flush already holds). PostgreSQL then aborts one side; when it aborts the flush, the flush is tried again (the
    worker's transaction has ended by then) rather than failing the test and leaving its rows to the next one."""
    from django.core.management.base import CommandError
    from django.test import TransactionTestCase
    from psycopg2.errors import DeadlockDetected

    flush = TransactionTestCase._fixture_teardown

    def deadlocked(error: BaseException | None) -> bool:
        while error is not None:
            if isinstance(error, DeadlockDetected):
                return True
            error = error.__cause__ or error.__context__
        return False

    def flush_retrying(self) -> None:
        for attempt in range(5):
            try:
                return flush(self)
            except CommandError as error:
                if attempt == 4 or not deadlocked(error):
                    raise

    TransactionTestCase._fixture_teardown = flush_retrying


@pytest.fixture(autouse=True)
def audit_checkpoint_dir(settings, tmp_path):
    """Each test its own audit checkpoints: a checkpoint names records of the test that wrote it."""
    settings.SWITCHYARD_AUDIT_CHECKPOINT_DIR = str(tmp_path / "audit-checkpoints")
    return tmp_path / "audit-checkpoints"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Test users log in with a known password; the production hasher's million rounds (0.2 s a user here)
    only cost time. Tests of the hashing itself set their own hashers."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def make_user(db):
    """make_user("sre-1", "sre", team="payments") → a user holding that role (and team membership)."""
    from django.contrib.auth.models import Group, User

    from apps.accounts.models import Team
    from apps.accounts.roles import sync_role_groups

    sync_role_groups()

    def make(username: str, *roles: str, team: str | None = None, superuser: bool = False):
        user = User.objects.create_user(username=username, password=TEST_PASSWORD, is_superuser=superuser,
                                        is_staff=superuser)
        user.groups.set(Group.objects.filter(name__in=roles))
        if team:
            team_obj, _ = Team.objects.get_or_create(name=team, defaults={"display_name": team.title()})
            team_obj.members.add(user)
        return user

    return make


@pytest.fixture
def api_for():
    """api_for(user) → a DRF APIClient authenticated with that user's token (None: anonymous)."""
    from rest_framework.test import APIClient

    from tests.support.tokens import token_for

    tokens: dict[int, str] = {}

    def make(user=None):
        client = APIClient()
        if user is not None:
            if user.pk not in tokens:
                tokens[user.pk] = token_for(user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {tokens[user.pk]}")
        return client

    return make


@pytest.fixture(scope="session")
def zk_connect():
    from tests.support.stack import zk_connect as connect

    return connect()


@pytest.fixture
def zk_chroot(zk_connect):
    """A fresh chroot per test so tests never see each other's znodes; removed afterwards."""
    from tests.support.stack import control_zk_client

    chroot = f"/test-{uuid.uuid4().hex[:12]}"
    yield chroot
    client = control_zk_client(zk_connect, timeout=5)
    client.start(timeout=5)
    try:
        client.delete(chroot, recursive=True)
    except Exception:
        pass
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="module")
def browser_context():
    """Per module: Playwright's sync API keeps an event loop marked running in this thread while it is
    started, and the broker tests call asyncio.run(), which refuses to run inside one."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import launch

    with sync_playwright() as playwright:
        context = launch(playwright)
        yield context
        context.close()


@pytest.fixture
def page(browser_context):
    page = browser_context.new_page()
    page.set_default_timeout(15000)
    yield page
    browser_context.clear_cookies()
    page.close()


@pytest.fixture(scope="session")
def trace_dirs(tmp_path_factory):
    """The broker trace folder and index folder the Celery worker's index builds use."""
    root = tmp_path_factory.mktemp("tracing-worker")
    return {"inputs": root / "brokers", "index": root / "index", "state": root / "state"}


def admin_token() -> str:
    """The admin token the control plane of the tests uses (settings read it from the environment)."""
    from django.conf import settings

    from broker_core.secret_source import read_secret

    return settings.SWITCHYARD_BROKER_ADMIN_TOKEN or read_secret("SWITCHYARD_BROKER_ADMIN_TOKEN")


def worker_environment(test_db: str, trace_dirs: dict, **extra: str) -> dict[str, str]:
    """The environment of a test Celery worker: the test database (as the runtime role, as in production), the
    test Redis and ZooKeeper, short retries and timeouts; `extra` adds or replaces variables."""
    return {**os.environ, "SWITCHYARD_DB_ROLE": "runtime", "SWITCHYARD_DB_NAME": test_db,
            "SWITCHYARD_STATE": str(trace_dirs["state"]),
            "SWITCHYARD_TRACE_INPUTS": str(trace_dirs["inputs"]), "SWITCHYARD_TRACE_INDEX_DIR": str(trace_dirs["index"]),
            "SWITCHYARD_SPARK_MASTER": "local[2]", "SWITCHYARD_PROVISION_BACKOFF_BASE": "1",
            "SWITCHYARD_PROVISION_BACKOFF_MAX": "2", "SWITCHYARD_ZK_TIMEOUT": "2",
            # back-checks: the test process's admin token, short waits for answers that never come
            "SWITCHYARD_BROKER_ADMIN_TOKEN": admin_token(), "SWITCHYARD_TX_CHECK_TIMEOUT_MS": "1000",
            "SWITCHYARD_TX_HTTP_CHECK_TIMEOUT": "2", **extra}


def start_worker(env: dict[str, str], log_path, name: str):
    """A real `celery worker --pool=solo` process (its own process group), once it answers a ping."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from control_plane.celery import app

    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "control_plane", "worker", "--pool=solo", "-l", "info",
             "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=Path(__file__).resolve().parents[1], env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if any(f"{name}@" in host for reply in app.control.ping(timeout=0.5) for host in reply):
                return proc
        except Exception:
            pass
    stop_worker(proc)
    raise RuntimeError(f"the Celery worker {name} did not start; see {log_path}")


def stop_worker(proc) -> None:
    import signal
    import subprocess

    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def kill_worker(proc) -> None:
    """Kill a worker with SIGKILL and empty the task queue: the next run it had queued for itself (with a countdown)
    dies with it even when the kill came before it took that run. Else the shared worker, once resumed, would run
    it, and a test of stalled work would depend on that instant instead of showing that the periodic resume finds
    the work. (A run the dead worker had taken stays unacknowledged in Redis for the visibility timeout, an hour.)"""
    import signal

    from control_plane.celery import app

    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    app.control.purge()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker, trace_dirs):
    """One real `celery worker --pool=solo` for the whole run, on the test database, the test Redis and
    ZooKeeper; its index builds run real Spark over `trace_dirs`. One worker only: two workers on the same
    queue would take each other's tasks."""
    import time

    from django.db import connection

    from control_plane.celery import app

    with django_db_blocker.unblock():
        test_db = connection.settings_dict["NAME"]
    app.control.purge()  # nothing left over from an earlier run
    for folder in trace_dirs.values():
        folder.mkdir(parents=True, exist_ok=True)
    proc = start_worker(worker_environment(test_db, trace_dirs), trace_dirs["state"] / "celery-worker.log",
                        f"test-{os.getpid()}")
    try:
        yield proc
    finally:
        stop_worker(proc)
        # its database session ends a moment after the process: let it go before the test database is dropped
        with django_db_blocker.unblock():
            with connection.cursor() as cur:
                for _ in range(100):
                    cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                                [test_db])
                    if cur.fetchone()[0] == 0:
                        break
                    time.sleep(0.1)
