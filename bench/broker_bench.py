"""Broker benchmark: one command, a broker on a temporary folder, 1 KiB messages, fsync group commit.

    .venv/bin/python bench/broker_bench.py [--messages 200000] [--paced-seconds 10] [--fsync batch]

The broker runs with --no-trace unless --trace is given (a production broker writes trace events by
default; the figures with them are lower: compare a run with --trace).

Prints, from one Python client process (the broker is a separate process, as in production):
  1. publish throughput: `send_nowait` pipelined with a window of 2,000 unacknowledged messages
     (the SDK batches them into frames by itself), and `send_many` of 100-message lists;
  2. end-to-end throughput: the same producer plus one consumer group (one consumer, acking);
  3. end-to-end latency at a paced 2,000 messages/s: p50 / p99 / max from send to the handler.

Each line also gives the CPU time per message of the broker process and of the client process:
the machine is shared and noisy, and CPU per message says more than wall-clock rates when other
work competes for the two cores.

ZooKeeper: $SWITCHYARD_ZK if set, else one started under sy-broker/bench in the system's temporary folder, on port 27592.
Ports 27580-27581 for the broker. Everything it starts is stopped at the end. $SWITCHYARD_BENCH_PORT=P moves
the broker benches' ports (P..P+3 for brokers, P+12 for ZooKeeper, state under sy-broker/bench-P), so
two stacks on one machine do not collide.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402

from broker_core.client import AsyncConsumer, AsyncProducer  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402
from broker_core.cluster.provision import Provisioner  # noqa: E402
from devstack.processes import port_open  # noqa: E402
from devstack.zookeeper import start_zookeeper, stop_zookeeper  # noqa: E402

BROKER_PORT = int(os.environ.get("SWITCHYARD_BENCH_PORT") or 27580)
ZK_PORT = BROKER_PORT + 12
STATE = Path(tempfile.gettempdir()) / "sy-broker" / ("bench" if BROKER_PORT == 27580 else f"bench-{BROKER_PORT}")
APP, SECRET, TOPIC, GROUP = "bench-app", "bench-secret", "bench", "bench-group"
BODY = b"x" * 1024
WINDOW = 2000
# the brokers started here read their admin token from the environment (never argv); /stats needs it
ADMIN_TOKEN = os.environ.setdefault("SWITCHYARD_BROKER_ADMIN_TOKEN", "bench-" + uuid.uuid4().hex)


@contextmanager
def bench_zookeeper() -> Iterator[tuple[str, KazooClient]]:
    """ZooKeeper for a bench: $SWITCHYARD_ZK, else its own on ZK_PORT (stopped on leaving); yields its connect
    string and a started client."""
    own_zk = not os.environ.get("SWITCHYARD_ZK")
    zk_hosts = os.environ.get("SWITCHYARD_ZK") or f"127.0.0.1:{ZK_PORT}"
    if own_zk:
        start_zookeeper(STATE, ZK_PORT, "zk-bench")
    client = KazooClient(hosts=zk_hosts)
    try:
        client.start(timeout=15)
        yield zk_hosts, client
    finally:
        client.stop()
        client.close()
        if own_zk:
            stop_zookeeper(STATE, "zk-bench")


def provision_app(pv: Provisioner, topics: tuple[str, ...] = (TOPIC,), group: str = GROUP) -> None:
    """The bench's app, with a grant on each of TOPICS (created) and GROUP bound to the first."""
    pv.app(APP, SECRET)
    for topic in topics:
        pv.topic(topic)
        pv.grant(topic, APP)
    if topics:
        pv.binding(topics[0], group, APP, max_in_flight=10_000)


@contextmanager
def bench_chroot(prefix: str, topics: tuple[str, ...] = (TOPIC,), group: str = GROUP,
                 **meta) -> Iterator[tuple[str, Provisioner]]:
    """ZooKeeper for a bench (`bench_zookeeper`) and a fresh chroot under /PREFIX/ holding the bench's app with a
    grant on each of TOPICS and GROUP bound to the first (META: the cluster's settings in /meta; no TOPICS: the
    bench provisions its own); yields the chroot's connect string and its provisioner. On leaving, the chroot
    goes, and the bench's own ZooKeeper with it."""
    with bench_zookeeper() as (zk_hosts, client):
        chroot = f"/{prefix}/{uuid.uuid4().hex[:8]}"
        pv = Provisioner(client, chroot, cluster="bench")
        pv.meta(**meta)
        provision_app(pv, topics, group)
        try:
            yield f"{zk_hosts}{chroot}", pv
        finally:
            client.delete(chroot, recursive=True)


@contextmanager
def bench_workdir(prefix: str) -> Iterator[Path]:
    """A fresh folder under the benches' state folder, removed on leaving."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=STATE))
    try:
        yield workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def client_kwargs(zk: str, cache_dir: Path | None = None) -> dict:
    """The SDK arguments of the bench's app on the cluster at ZK (its route cache in CACHE_DIR)."""
    return {"app_id": APP, "secret": SECRET, "zk": zk, "cache_dir": cache_dir or STATE / "sdk-cache"}


def hold_bench_lock():
    """Only one broker bench at a time on the same ports (27580-27583 and ZooKeeper 27592, or those of
    $SWITCHYARD_BENCH_PORT). Returns the open
    lock file (held until the process ends); exits with a message if another bench holds it."""
    STATE.mkdir(parents=True, exist_ok=True)
    lock = open(STATE / "bench.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another broker bench is running (it holds {STATE / 'bench.lock'}): wait for it to end, "
                         "or stop it, then run again") from None
    return lock


def start_broker(zk: str, data_dir: Path, fsync: str, trace: bool, port: int = BROKER_PORT,
                 cluster: str = "bench", extra: tuple[str, ...] = (), prefix: tuple[str, ...] = (),
                 start_timeout: float = 30, root: Path = ROOT) -> subprocess.Popen:
    """A broker process on `port` (its metrics on port + 1), logging to data_dir/../broker.log (`extra`: more
    broker options; `prefix`: a command to run it under; `root`: the checkout it runs from)."""
    argv = [*prefix, sys.executable, "-m", "broker_core", "--cluster", cluster, "--zk", zk, "--data-dir",
            str(data_dir), "--port", str(port), "--metrics-port", str(port + 1), "--fsync", fsync,
            "--log-level", "WARNING", "--trace" if trace else "--no-trace", *extra]
    log = open(data_dir.parent / "broker.log", "ab")
    env = {**os.environ, "PYTHONPATH": str(root)} if root != ROOT else None
    proc = subprocess.Popen(argv, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    deadline = time.monotonic() + start_timeout
    while not port_open(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the broker did not start; see {data_dir.parent / 'broker.log'}")
        time.sleep(0.05)
    return proc


def stop_brokers(procs: list[subprocess.Popen], timeout: float = 30) -> None:
    """Stop the broker processes still running (SIGTERM: each flushes and stops), waiting for each."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        proc.wait(timeout=timeout)


def broker_stats(port: int = BROKER_PORT) -> dict:
    """The /stats of the bench broker on `port` (behind its admin token, which it got from the environment)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port + 1}/stats",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as r:
        return json.loads(r.read())


async def publish_pipelined(producer: AsyncProducer, count: int, topic: str = TOPIC) -> float:
    """send_nowait for each message, keeping at most WINDOW of them unacknowledged."""
    state = {"outstanding": 0, "left": count}
    room = asyncio.Event()
    finished = asyncio.Event()

    def acked(future: asyncio.Future) -> None:
        if future.exception() is not None:
            raise SystemExit(f"a send failed: {future.exception()}")
        state["outstanding"] -= 1
        state["left"] -= 1
        if state["outstanding"] <= WINDOW // 2:
            room.set()
        if state["left"] == 0:
            finished.set()

    started = time.perf_counter()
    send = producer.send_nowait
    for _ in range(count):
        if state["outstanding"] >= WINDOW:
            room.clear()
            await room.wait()
        state["outstanding"] += 1
        send(topic, BODY).add_done_callback(acked)
    await finished.wait()
    return count / (time.perf_counter() - started)


async def publish_many(producer: AsyncProducer, count: int, per_call: int = 100, topic: str = TOPIC) -> float:
    window = asyncio.Semaphore(WINDOW // per_call)
    tasks = []

    async def one() -> None:
        try:
            await producer.send_many(topic, [BODY] * per_call)
        finally:
            window.release()

    started = time.perf_counter()
    for _ in range(count // per_call):
        await window.acquire()
        tasks.append(asyncio.ensure_future(one()))
    await asyncio.gather(*tasks)
    return (count // per_call) * per_call / (time.perf_counter() - started)


async def end_to_end(producer: AsyncProducer, kwargs: dict, count: int, topic: str = TOPIC,
                     group: str = GROUP) -> tuple[float, float]:
    received = [0]
    done = asyncio.Event()

    def handle(message) -> None:
        received[0] += 1
        if received[0] >= count:
            done.set()

    consumer = AsyncConsumer(topic, group, handle, credit=5000, **kwargs)
    await consumer.start()
    started = time.perf_counter()
    publish_rate = await publish_pipelined(producer, count, topic)
    await asyncio.wait_for(done.wait(), 120)
    elapsed = time.perf_counter() - started
    await consumer.stop()
    return count / elapsed, publish_rate


async def paced_latency(producer: AsyncProducer, kwargs: dict, rate: int, seconds: float, topic: str = TOPIC,
                        group: str = GROUP) -> list[float]:
    """Send `rate` messages a second for `seconds` to a group with one consumer; each one's latency from send
    to the handler (seconds)."""
    latencies: list[float] = []
    total = int(rate * seconds)
    done = asyncio.Event()

    def handle(message) -> None:
        latencies.append(time.perf_counter() - float(message.headers["t"]))
        if len(latencies) >= total:
            done.set()

    consumer = AsyncConsumer(topic, group, handle, credit=1000, **kwargs)
    await consumer.start()
    await asyncio.sleep(0.5)
    started = time.perf_counter()
    for i in range(total):
        due = started + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        producer.send_nowait(topic, BODY, headers={"t": repr(time.perf_counter())})
    await asyncio.wait_for(done.wait(), 60)
    await consumer.stop()
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class CpuMeter:
    """CPU seconds used by the broker process, by its children (the trace writer process) and by this
    (client) process during a phase."""

    def __init__(self, broker_pid: int):
        self.broker_pid = broker_pid

    @staticmethod
    def _cpu(pid: int) -> float:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _children(self) -> float:
        total = 0.0
        for task in Path(f"/proc/{self.broker_pid}/task").glob("*"):
            try:
                pids = (task / "children").read_text().split()
            except OSError:
                continue
            total += sum(self._cpu(int(pid)) for pid in pids)
        return total

    def now(self) -> tuple[float, float, float]:
        return self._cpu(self.broker_pid), sum(os.times()[:2]), self._children()

    def start(self) -> None:
        self.t0 = self.now()

    def per_message(self, count: int) -> dict:
        b1, c1, t1 = self.now()
        return {"broker_cpu_us": (b1 - self.t0[0]) / count * 1e6, "client_cpu_us": (c1 - self.t0[1]) / count * 1e6,
                "trace_cpu_us": (t1 - self.t0[2]) / count * 1e6}


async def trace_process_started(trace_dir: Path, timeout: float = 60.0) -> None:
    """Wait until the broker's trace process wrote its first events: its start (importing pyarrow, about
    0.4 s of CPU once) is then not counted in the first phase."""
    deadline = time.monotonic() + timeout
    while not any(trace_dir.glob("*.arrows.open")):
        if time.monotonic() > deadline:
            raise SystemExit(f"the trace process wrote nothing in {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def run(args, zk: str, cpu: CpuMeter, trace_dir: Path | None = None) -> dict:
    kwargs = client_kwargs(zk)
    producer = AsyncProducer(**kwargs)
    await producer.connect(TOPIC)
    await publish_pipelined(producer, 5000)  # warm up (connections, allocator, page cache)
    if trace_dir is not None:
        await trace_process_started(trace_dir)
    results = {}
    cpu.start()
    results["publish_pipelined"] = await publish_pipelined(producer, args.messages)
    results["cpu_publish_pipelined"] = cpu.per_message(args.messages)
    cpu.start()
    results["publish_send_many_100"] = await publish_many(producer, args.messages)
    results["cpu_publish_send_many_100"] = cpu.per_message(args.messages)
    # the group drains what the publish runs stored before the end-to-end run starts
    drained = asyncio.Event()
    backlog = broker_stats()["topics"][TOPIC]["groups"][GROUP]["depth"]
    got = [0]

    def drain(_m) -> None:
        got[0] += 1
        if got[0] >= backlog:
            drained.set()

    consumer = AsyncConsumer(TOPIC, GROUP, drain, credit=5000, **kwargs)
    cpu.start()
    await consumer.start()
    started = time.perf_counter()
    await asyncio.wait_for(drained.wait(), 300)
    results["drain_backlog"] = backlog / (time.perf_counter() - started)
    results["cpu_drain_backlog"] = cpu.per_message(backlog)
    await consumer.stop()
    cpu.start()
    results["end_to_end"], results["end_to_end_publish"] = await end_to_end(producer, kwargs, args.messages)
    results["cpu_end_to_end"] = cpu.per_message(args.messages)
    latencies = await paced_latency(producer, kwargs, args.paced_rate, args.paced_seconds)
    results["paced"] = {"rate": args.paced_rate, "messages": len(latencies),
                        "p50_ms": percentile(latencies, 0.50) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
                        "max_ms": max(latencies) * 1000, "mean_ms": statistics.fmean(latencies) * 1000}
    await producer.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--paced-rate", type=int, default=2000)
    parser.add_argument("--paced-seconds", type=float, default=10.0)
    parser.add_argument("--fsync", default="batch", choices=["batch", "interval", "never"])
    parser.add_argument("--trace", action="store_true",
                        help="have the broker write trace events (its default); off here unless given")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args()

    lock = hold_bench_lock()  # noqa: F841  (held until the process ends)
    with bench_chroot("sy-broker-bench") as (zk, _), bench_workdir("run-") as workdir:
        broker = start_broker(zk, workdir / "data", args.fsync, args.trace)
        try:
            loop = new_event_loop()
            results = loop.run_until_complete(run(args, zk, CpuMeter(broker.pid),
                                                  workdir / "data" / "trace" if args.trace else None))
            loop.close()
            results["broker"] = broker_stats()["topics"][TOPIC]["store"]
        finally:
            stop_brokers([broker])

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    paced = results["paced"]
    print(f"broker bench: 1 KiB messages, fsync={args.fsync}{' + trace' if args.trace else ''}, "
          f"one client process, {os.cpu_count()} cores")
    def line(label: str, key: str) -> None:
        c = results[f"cpu_{key}"]
        trace = f", trace writer {c['trace_cpu_us']:.1f} us" if args.trace else ""
        print(f"  {label:<46} {results[key]:>9,.0f} msgs/s   (CPU per message: broker "
              f"{c['broker_cpu_us']:.1f} us, client {c['client_cpu_us']:.1f} us{trace})")

    line(f"publish, send_nowait pipelined (window {WINDOW}):", "publish_pipelined")
    line(f"publish, send_many of 100 (window {WINDOW}):", "publish_send_many_100")
    line("drain a backlog, one consumer acking:", "drain_backlog")
    line("end-to-end, publish + one group acking:", "end_to_end")
    print(f"  paced {paced['rate']:,}/s for {paced['messages']:,} msgs: p50 {paced['p50_ms']:.2f} ms, "
          f"p99 {paced['p99_ms']:.2f} ms, max {paced['max_ms']:.2f} ms")
    store = results["broker"]
    print(f"  broker store: {store['flushes']:,} flush jobs, {store['fsyncs']:,} fsyncs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
