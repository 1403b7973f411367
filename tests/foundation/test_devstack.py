"""The README's `up` and `down`: a whole stack under its own state folder and ports.

Runs `python -m devstack` (what `./dev up` runs after installing packages) twice, checks the
printed URL serves the login page and that the demo traffic flows through what the demo data approved
(seeded through the workflow, provisioned into ZooKeeper by the Celery worker, served by the demo
brokers), then `down` and checks no process of that stack is left.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from broker_core.secret_source import read_secret_file

ROOT = Path(__file__).resolve().parents[2]
PORT_BASE = 27300


def processes_of(state_root: Path) -> list[int]:
    """PIDs whose command line or environment names this stack's state folder."""
    found = []
    marker = str(state_root).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in blob:
            found.append(int(entry.name))
    return found


def devstack(state_root: Path, command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    env.update(SWITCHYARD_STATE_ROOT=str(state_root), SWITCHYARD_PORT_BASE=str(PORT_BASE))
    return subprocess.run([sys.executable, "-m", "devstack", command], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def demo_groups_acking(metrics_port: int, token: str, timeout: float = 90) -> set[tuple[str, str]]:
    """The (topic, group) pairs with acked messages on one demo broker, once all three have some (/stats needs
    the stack's broker admin token)."""
    deadline = time.monotonic() + timeout
    acking: set[tuple[str, str]] = set()
    request = urllib.request.Request(f"http://127.0.0.1:{metrics_port}/stats",
                                     headers={"Authorization": f"Bearer {token}"})
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                stats = json.loads(response.read())
        except OSError:
            stats = {}
        acking = {(topic, group) for topic, t in stats.get("topics", {}).items()
                  for group, g in t.get("groups", {}).items() if g.get("acked")}
        if len(acking) >= 3:
            break
        time.sleep(1)
    return acking


@pytest.fixture
def state_root(tmp_path):
    root = tmp_path / "stack"
    yield root
    devstack(root, "down")


def test_up_twice_serves_login_and_down_leaves_nothing(state_root):
    first = devstack(state_root, "up")
    assert first.returncode == 0, first.stderr[-3000:]
    url = re.search(r"Switchyard is up: (http://\S+)", first.stdout).group(1)
    assert url == f"http://127.0.0.1:{PORT_BASE + 10}/"
    for login in ("dev-alice", "appr-bob", "sre-carol", "audit-dan", "admin"):
        assert login in first.stdout

    second = devstack(state_root, "up")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "already running" in second.stderr

    with urllib.request.urlopen(url + "login/", timeout=10) as response:
        body = response.read().decode()
    assert response.status == 200 and "Log in to Switchyard" in body
    assert processes_of(state_root)

    # the brokers' admin token is in the state folder (mode 600) and on no process's command line
    token_file = state_root / "dev" / "secrets" / "broker-admin-token"
    token = read_secret_file(token_file)
    for pid in processes_of(state_root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert token.encode() not in cmdline, f"the broker admin token is on the command line of pid {pid}"
    # the demo topics were approved and provisioned: the demo traffic is flowing through both brokers
    for metrics_port in (PORT_BASE + 40, PORT_BASE + 41):
        assert demo_groups_acking(metrics_port, token) == {
            ("payments.demo-orders", "audit-feed"), ("payments.demo-orders", "shipping"),
            ("payments.demo-payments", "ledger")}

    down = devstack(state_root, "down")
    assert down.returncode == 0, down.stderr[-3000:]
    assert processes_of(state_root) == []
