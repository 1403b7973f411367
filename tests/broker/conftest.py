"""Fixtures of the broker tests: a real ZooKeeper, a chroot per test, real broker processes.

ZooKeeper: $SWITCHYARD_ZK when set (`./dev test` exports it), else one started here on port base+390.
Brokers run as `python -m broker_core` subprocesses on ports base+300..base+389 (or 90 from
$SWITCHYARD_TEST_BROKER_PORTS) and are killed at teardown
(base = $SWITCHYARD_PORT_BASE, 27200 by default, so two stacks never collide).
State lives under the test state folder's broker/ (or sy-broker/ in the system's temporary folder outside `./dev test`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker_core.cluster.provision import Provisioner
from broker_core.layout import LAYOUT
from broker_core.secret_source import read_secret
from devstack.waiting import (
    wait_closely as wait_for,  # the broker tests' wait (they import it from here)
)
from devstack.zookeeper import start_zookeeper, stop_zookeeper
from tests.support.stack import broker_environment, control_zk_client, zk_acl_policy

ROOT = Path(__file__).resolve().parents[2]
PORT_BASE = int(os.environ.get("SWITCHYARD_PORT_BASE", "27200"))
STATE = Path(os.environ["SWITCHYARD_STATE"]) / "broker" if os.environ.get("SWITCHYARD_STATE") else Path(tempfile.gettempdir()) / "sy-broker"
ZK_PORT = PORT_BASE + 390
SECOND_ZK_PORT = PORT_BASE + 391
# the brokers' ports: 90 from base+300, or from $SWITCHYARD_TEST_BROKER_PORTS (`./dev test` runs these tests beside
# the others, which take theirs from base+300: devstack/testrun.py)
FIRST_BROKER_PORT = int(os.environ.get("SWITCHYARD_TEST_BROKER_PORTS", PORT_BASE + 300))
_ports = itertools.cycle(range(FIRST_BROKER_PORT, FIRST_BROKER_PORT + 90, 2))

APP = "app-orders"
SECRET = "s3cret-orders"


def free_port_pair() -> int:
    """A port P with P and P+1 free (P for the broker, P+1 for its HTTP endpoints)."""
    import socket

    for _ in range(45):
        port = next(_ports)
        ok = True
        for candidate in (port, port + 1):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", candidate))
                except OSError:
                    ok = False
        if ok:
            return port
    raise RuntimeError(f"no free port pair in {FIRST_BROKER_PORT}-{FIRST_BROKER_PORT + 89}")


@pytest.fixture(scope="session")
def zk_hosts():
    env = os.environ.get("SWITCHYARD_ZK")
    if env:
        yield env
        return
    state = STATE / "zk-tests"
    start_zookeeper(state, ZK_PORT, "zk-broker-tests")
    try:
        yield f"127.0.0.1:{ZK_PORT}"
    finally:
        stop_zookeeper(state, "zk-broker-tests")


@pytest.fixture(scope="session")
def zk(zk_hosts):
    """Authenticated as the control plane: the tests provision as it does (docs/security.md)."""
    client = control_zk_client(zk_hosts, timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


TOKEN_VAR = "SWITCHYARD_BROKER_ADMIN_TOKEN"


class BrokerProcess:
    """A broker subprocess. Its admin token (for /stats, /deadletters, /admin/) comes from its environment:
    `admin_token` None: the test process's (tests/conftest.py sets one); "": none; else that one. `env`: more
    variables for it (a None value removes one)."""

    def __init__(self, cluster: Cluster, index: int, port: int, extra: list[str], admin_token: str | None = None,
                 env: dict[str, str | None] | None = None):
        self.cluster = cluster
        self.env = {k: v for k, v in broker_environment().items() if k not in (TOKEN_VAR, TOKEN_VAR + "_FILE")}
        if admin_token is None:
            self.env.update({k: os.environ[k] for k in (TOKEN_VAR, TOKEN_VAR + "_FILE") if k in os.environ})
        elif admin_token:
            self.env[TOKEN_VAR] = admin_token
        for k, v in (env or {}).items():
            if v is None:
                self.env.pop(k, None)
            else:
                self.env[k] = v
        self.admin_token = admin_token if admin_token is not None else read_secret(TOKEN_VAR, default="")
        self.index = index
        self.port = port
        self.metrics_port = port + 1
        self.data_dir = cluster.state / f"broker-{index}"
        self.log_path = cluster.state / f"broker-{index}.log"
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.node_id = f"{cluster.name}-b{index}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> BrokerProcess:
        self._old_owner = self.owner()  # a killed broker's node lingers until its session expires
        argv = [sys.executable, "-m", "broker_core", "--cluster", self.cluster.name, "--zk", self.cluster.zk,
                "--data-dir", str(self.data_dir), "--port", str(self.port), "--metrics-port",
                str(self.metrics_port), "--node-id", self.node_id, "--zk-session-timeout-s", "2",
                "--heartbeat-ms", "1000", *self.extra]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=ROOT, start_new_session=True, env=self.env)
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20) -> None:
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"broker exited with {self.proc.returncode}; log:\n{self.log()}")
            owner = self.owner()
            return owner is not None and owner != self._old_owner

        wait_for(ready, timeout, f"broker {self.node_id} to register")

    def owner(self) -> int | None:
        """The ZooKeeper session holding this broker's ephemeral node (None: not registered)."""
        try:
            stat = self.cluster.zk_client.exists_async(self.cluster.chroot + LAYOUT.broker(self.node_id)).get(timeout=2)
        except Exception:  # ZooKeeper down (some tests stop it on purpose)
            return None
        return stat.ephemeralOwner if stat else None

    def registered(self) -> bool:
        return self.owner() is not None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(timeout=20)

    def lose_disk(self) -> None:
        """The machine is lost: the broker and its trace process (its process group) SIGKILLed, its data folder
        deleted (once nothing of it writes there any more: the trace process would finish its file meanwhile)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)

            def group_gone() -> bool:
                try:
                    os.killpg(self.proc.pid, 0)
                except ProcessLookupError:
                    return True
                return False

            wait_for(group_gone, 10, f"broker {self.node_id}'s processes to end")
        shutil.rmtree(self.data_dir)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def restart(self) -> BrokerProcess:
        self.kill()
        return self.start()

    def stats(self) -> dict:
        return json.loads(self.http("/stats"))

    def group_stats(self, topic: str, group: str) -> dict:
        return self.stats()["topics"].get(topic, {}).get("groups", {}).get(group, {})

    def http(self, path: str) -> bytes:
        """GET path with this broker's admin token (/healthz and /metrics need none; the rest do)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.metrics_port}{path}")
        if self.admin_token:
            request.add_header("Authorization", f"Bearer {self.admin_token}")
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.read()

    def rss_bytes(self) -> int:
        """The broker process's resident set size now (VmRSS of /proc/<pid>/status)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no VmRSS for broker pid {self.proc.pid}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]


class Cluster:
    """One test's cluster: its own chroot, provisioning helpers and broker processes."""

    def __init__(self, zk_hosts: str, zk_client: KazooClient, name: str, state: Path):
        self.name = name
        self.chroot = f"/sy-broker-tests/{name}"
        self.zk_hosts = zk_hosts
        self.zk = f"{zk_hosts}{self.chroot}"
        self.zk_client = zk_client
        self.state = state
        self.pv = Provisioner(zk_client, self.chroot, cluster=name, policy=zk_acl_policy())
        self.pv.skeleton()  # the chroot and /brokers, with their ACLs: brokers may not create them
        self.brokers: list[BrokerProcess] = []
        self.cache_dir = state / "sdk-cache"

    def standard(self, topic: str = "orders", app: str = APP, secret: str = SECRET) -> None:
        """An app with a grant on a topic: the usual starting point."""
        self.pv.meta()
        self.pv.app(app, secret)
        self.pv.topic(topic)
        self.pv.grant(topic, app)

    def broker(self, *extra: str, start: bool = True, admin_token: str | None = None,
               env: dict[str, str | None] | None = None) -> BrokerProcess:
        b = BrokerProcess(self, len(self.brokers), free_port_pair(), list(extra), admin_token, env)
        self.brokers.append(b)
        return b.start() if start else b

    def client_kwargs(self, app: str = APP, secret: str = SECRET, **kw) -> dict:
        return {"app_id": app, "secret": secret, "zk": self.zk, "cache_dir": self.cache_dir, **kw}

    def teardown(self) -> None:
        for b in self.brokers:
            try:
                b.kill()
            except Exception:
                pass
        try:
            self.zk_client.delete(self.chroot, recursive=True)
        except Exception:
            pass


@pytest.fixture
def cluster(zk_hosts, zk, request):
    name = f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}".lower()
    state = STATE / "tests" / name
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    c = Cluster(zk_hosts, zk, name, state)
    yield c
    c.teardown()
    if not (hasattr(request.node, "rep_call") and request.node.rep_call.failed):
        shutil.rmtree(state, ignore_errors=True)


REPORTS: list[str] = []


def pytest_terminal_summary(terminalreporter):
    if REPORTS:
        terminalreporter.section("broker test figures")
        for line in REPORTS:
            terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
