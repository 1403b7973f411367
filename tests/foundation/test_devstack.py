"""The README's `up` and `down`: a whole stack under its own state folder and ports.

Runs `python -m devstack` (what `./dev up` runs after installing packages) twice, checks the
printed URL serves the login page and that the demo traffic flows through what the demo data approved
(seeded through the workflow, provisioned into ZooKeeper by the Celery worker, served by the demo
brokers). While it runs (an index build on Spark included), no secret of the stack is on any of its
processes' command lines or in any of its logs, and the audit chain is checkpointed and verifies. Then
`down`, and no process of that stack is left.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
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


def stack_secrets(state: Path) -> dict[str, str]:
    """Every secret of the stack: each file under state/secrets/ (pgpass: its password field) and the demo apps'
    secrets, by where they come from."""
    found = {}
    for path in sorted((state / "secrets").iterdir()):
        text = path.read_text().strip()
        found[f"secrets/{path.name}"] = text.rsplit(":", 1)[-1] if path.name == "pgpass" else text
    demo = json.loads((state / "demo-app-secrets.json").read_text())
    for name, value in (demo.items() if isinstance(demo, dict) else enumerate(demo)):
        for secret in (value.values() if isinstance(value, dict) else [value]):
            if isinstance(secret, str) and len(secret) >= 16:
                found[f"demo-app-secrets.json:{name}"] = secret
    assert len(found) >= 5, found
    return found


def secrets_on_command_lines(state_root: Path, secrets: dict[str, str]) -> set[str]:
    """(secret, pid: command) for every secret on the command line of a process of the stack (what `ps` shows)."""
    hits = set()
    for pid in processes_of(state_root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
        except OSError:
            continue
        hits |= {f"{name} in the command line of pid {pid}: {cmdline[:120]}"
                 for name, value in secrets.items() if value in cmdline}
    return hits


def log_files(state: Path) -> list[Path]:
    """The stack's logs: logs/ (web, Celery, brokers, demo traffic, Spark, ZooKeeper's output), PostgreSQL's,
    ZooKeeper's and Redis's own."""
    found = []
    for folder, _dirs, files in os.walk(state, followlinks=True):  # state/postgres may link elsewhere
        for name in files:
            path = Path(folder) / name
            if path.parent.name == "logs" or re.search(r"\.(log|out)(\.\d+)?$", name):
                found.append(path)
    return found


def secrets_in_logs(state: Path, secrets: dict[str, str]) -> set[str]:
    hits = set()
    for path in log_files(state):
        text = path.read_bytes().decode(errors="replace")
        hits |= {f"{name} in {path.relative_to(state)}" for name, value in secrets.items() if value in text}
    return hits


def manage(state: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """manage.py with the variables `./dev up` wrote for its processes (secrets as file paths)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    env.update(json.loads((state / "env.json").read_text()))
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


BUILD_INDEX = """
import time
import control_plane.celery  # the Celery app the build task is queued through
from django.contrib.auth.models import User
from apps.tracing import actions
from apps.tracing.models import IndexRun
run = actions.active_run() or actions.request_index_build(actor=User.objects.get(username="sre-carol"))
deadline = time.monotonic() + 500
while IndexRun.objects.get(pk=run.pk).state in ("queued", "running") and time.monotonic() < deadline:
    time.sleep(1)
run.refresh_from_db()
print("index run", run.pk, run.state, run.error)
"""


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

    # Prometheus scrapes both demo brokers (targets written from ZooKeeper membership) and the control plane
    def scraped() -> set[tuple[str, str]]:
        query = urllib.parse.urlencode({"query": "up == 1"})
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT_BASE + 3}/api/v1/query?{query}", timeout=5) as r:
                found = json.loads(r.read())["data"]["result"]
        except OSError:
            return set()
        return {(m["metric"]["job"], m["metric"].get("cluster", "")) for m in found}

    deadline = time.monotonic() + 90
    while scraped() != {("switchyard-brokers", "dev-a"), ("switchyard-brokers", "prod-a"),
                        ("switchyard-control-plane", "")} and time.monotonic() < deadline:
        time.sleep(1)
    assert scraped() == {("switchyard-brokers", "dev-a"), ("switchyard-brokers", "prod-a"),
                         ("switchyard-control-plane", "")}
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT_BASE + 4}/-/ready", timeout=5) as response:
        assert response.status == 200  # Alertmanager

    # no secret of the stack on a command line or in a log, while an index build runs Spark's load as well
    state = state_root / "dev"
    secrets = stack_secrets(state)
    seen_on_command_lines: set[str] = set()
    build_output: list[str] = []
    build = threading.Thread(target=lambda: build_output.append(
        (lambda r: r.stdout + r.stderr[-2000:])(manage(state, "shell", "-c", BUILD_INDEX))))
    build.start()
    while build.is_alive():
        seen_on_command_lines |= secrets_on_command_lines(state_root, secrets)
        time.sleep(0.2)
    assert re.search(r"^index run \d+ succeeded", build_output[0], re.M), build_output
    assert any((state / "logs").glob("trace-index-*.log")), "the index build ran Spark"
    leaks = seen_on_command_lines | secrets_on_command_lines(state_root, secrets) | secrets_in_logs(state, secrets)

    # the audit chain's head is checkpointed by beat (every 30 s) and the chain verifies against it
    checkpoint = state / "audit-checkpoints" / "switchyard.latest.json"
    deadline = time.monotonic() + 90
    while not checkpoint.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert checkpoint.exists(), "Celery beat wrote no audit checkpoint"
    verified = manage(state, "audit_verify")
    assert verified.returncode == 0 and "audit chain intact" in verified.stdout, verified.stderr
    assert not leaks, "secrets leaked:\n" + "\n".join(sorted(leaks))

    down = devstack(state_root, "down")
    assert down.returncode == 0, down.stderr[-3000:]
    assert processes_of(state_root) == []
