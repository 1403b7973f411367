"""What authenticating one connection costs the broker: the secret check alone, and a real Hello round trip.

    . <state>/env.sh   # or run under `python -m devstack`'s environment: $SWITCHYARD_ZK and the ZooKeeper credentials
    .venv/bin/python bench/auth_bench.py [--connections 2000]

Prints:
  1. verify time per check, in this process: the HMAC-SHA256 scheme (broker_core.auth) and, for comparison,
     the PBKDF2 hashes (60,000 rounds) made before it, which brokers still accept until the app's next rotation;
  2. a real broker process (its own chroot in $SWITCHYARD_ZK, provisioned with the control plane's ACLs):
     sequential connections that each connect, send Hello and wait for Welcome (or the refusal) and close —
     the wall time per round trip (p50 / p99) and the broker's CPU per connection (utime + stime from /proc,
     minus what the idle broker used over the same time). Right secrets and wrong ones (a connection storm
     with made-up secrets, nothing to cache) on the HMAC scheme; a few wrong ones on a PBKDF2 hash.

Port: $SWITCHYARD_PORT_BASE + 60 (and + 61 for its HTTP endpoints). Everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402

from bench.broker_bench import start_broker  # noqa: E402
from broker_core import protocol as p  # noqa: E402
from broker_core.auth import hash_secret, new_secret, verify_secret  # noqa: E402
from broker_core.cluster.provision import Provisioner  # noqa: E402
from broker_core.cluster.zk_acl import AclPolicy, broker_acl_id, control_credential  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def pbkdf2_hash(secret: str, rounds: int = 60_000) -> str:
    salt = uuid.uuid4().hex[:24]
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), rounds)
    return f"pbkdf2_sha256${rounds}${salt}${base64.b64encode(digest).decode()}"


def per_call(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def hello(port: int, app: str, secret: str) -> tuple[float, bool]:
    """One connection: connect, Hello, wait for Welcome or Error, close. (seconds, welcomed)"""
    conn = p.Connection(p.CLIENT)
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(conn.send(p.Hello(p.PROTOCOL_VERSION, "bench", app, secret, 10_000, {})))
        while True:
            event = conn.next_event()
            if event is p.NEED_DATA:
                data = sock.recv(65536)
                if not data:
                    return time.perf_counter() - t, False
                conn.receive_data(data)
                continue
            if isinstance(event, p.Welcome):
                return time.perf_counter() - t, True
            if isinstance(event, p.Error):
                return time.perf_counter() - t, False


def storm(pid: int, port: int, app: str, secrets: list[str], idle_cpu_per_s: float, label: str, expect: bool) -> None:
    cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
    times = []
    for secret in secrets:
        elapsed, welcomed = hello(port, app, secret)
        if welcomed != expect:
            raise SystemExit(f"{label}: the broker {'refused' if expect else 'accepted'} a connection")
        times.append(elapsed)
    wall = time.perf_counter() - wall0
    cpu = cpu_seconds(pid) - cpu0 - idle_cpu_per_s * wall
    times.sort()
    print(f"  {label:<44} {len(times):>5} conns: round trip p50 {statistics.median(times) * 1000:6.3f} ms, "
          f"p99 {times[int(len(times) * 0.99) - 1] * 1000:6.3f} ms; broker CPU {cpu / len(times) * 1000:6.3f} ms "
          f"per connection")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    args = parser.parse_args()
    zk_hosts = os.environ.get("SWITCHYARD_ZK")
    control = control_credential()
    if not zk_hosts or control is None or broker_acl_id() is None:
        raise SystemExit("run under a stack's environment: $SWITCHYARD_ZK and the ZooKeeper credentials "
                         "(SWITCHYARD_ZK_CONTROL_AUTH_FILE, SWITCHYARD_ZK_BROKER_AUTH_FILE; see docs/security.md)")

    secret = new_secret()
    fast, legacy = hash_secret(secret), pbkdf2_hash(secret)
    print("secret check in this process (one core):")
    print(f"  hmac_sha256 (broker_core.auth)        {per_call(lambda: verify_secret(secret, fast), 200_000) * 1e6:8.2f} µs")
    print(f"  pbkdf2_sha256, 60,000 rounds (legacy) {per_call(lambda: verify_secret(secret, legacy), 20) * 1e6:8.0f} µs")

    port = int(os.environ.get("SWITCHYARD_PORT_BASE", "27200")) + 60
    chroot = f"/bench-auth-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zk_hosts, timeout=10, auth_data=control.auth_data)
    zk.start(timeout=15)
    folder = Path(tempfile.mkdtemp(prefix="auth-bench-"))
    proc = None
    try:
        pv = Provisioner(zk, chroot, cluster="auth-bench",
                         policy=AclPolicy(control_id=control.acl_id, broker_id=broker_acl_id()))
        pv.skeleton()
        pv.meta()
        pv.app("fast-app", secret)
        pv.app("legacy-app", secret, secret_hash=legacy)
        (folder / "data").mkdir()
        env_without_control = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_ZK_CONTROL_AUTH")}
        os.environ.clear()
        os.environ.update(env_without_control)  # the broker gets its own credential only
        proc = start_broker(f"{zk_hosts}{chroot}", folder / "data", "batch", False, port=port, cluster="auth-bench")
        while hello(port, "fast-app", secret)[1] is False:  # until it has read the app from ZooKeeper
            time.sleep(0.1)
        cpu0 = cpu_seconds(proc.pid)
        time.sleep(2)
        idle = (cpu_seconds(proc.pid) - cpu0) / 2
        print(f"a broker process (pid {proc.pid}), sequential connections from one client "
              f"(idle broker: {idle * 1000:.1f} ms CPU/s, subtracted):")
        n = args.connections
        storm(proc.pid, port, "fast-app", [secret] * n, idle, "hmac_sha256, right secret", True)
        storm(proc.pid, port, "fast-app", [new_secret() for _ in range(n)], idle, "hmac_sha256, wrong secrets (a storm)",
              False)
        storm(proc.pid, port, "legacy-app", [new_secret() for _ in range(50)], idle,
              "pbkdf2 60,000 rounds, wrong secrets (before)", False)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)
        zk.delete(chroot, recursive=True)
        zk.stop()
        zk.close()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
