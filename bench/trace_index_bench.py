"""Trace index bench: the whole index job's rate on local[N], and lookup latency through the REST API.

    . <state>/env.sh          # a stack from ./dev or devstack (PostgreSQL)
    .venv/bin/python bench/trace_index_bench.py [--events 5000000] [--master local[2]] [--web-port 27710]

1. writes N synthetic trace events with the broker's own trace writer (kept for the next run),
2. builds the Parquet index alone from nothing (session start excluded; `--no-index-only` skips it), then
   runs the whole job from nothing, which also makes the lookups servable: each task loads its rows into
   PostgreSQL (database `switchyard_bench`, migrated here); prints events/s for both, and the job's progress
   lines (the last gives the seconds the tasks spent summarizing, writing and loading, in all),
3. starts gunicorn on the bench database and times GET /api/v1/traces/messages/<id>/ and
   ?business_id=... for random messages: prints p50/p99,
4. prints the broker throughput with tracing on vs off when the broker can be benched (bench/broker_trace_ratio.py).
Figures only, no assertions. The machine is shared: compare figures from one run.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg2  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from bench.trace_events import business_id, generate, message_id  # noqa: E402
from broker_core.secret_source import read_secret  # noqa: E402
from spark_jobs import trace_index  # noqa: E402
from spark_jobs.session import spark_session  # noqa: E402
from spark_jobs.trace_read import read_events  # noqa: E402

DB = "switchyard_bench"


def env_for_bench() -> dict[str, str]:
    # the bench makes and migrates its own database: as the owner role
    return {**os.environ, "SWITCHYARD_DB_NAME": DB, "DJANGO_SETTINGS_MODULE": "control_plane.settings",
            "SWITCHYARD_DB_ROLE": "owner"}


def prepare_database(env) -> tuple[str, str]:
    """A fresh bench database; the JDBC URL (no password) and the password to load it as the owner."""
    port = env.get("SWITCHYARD_DB_PORT", "27100")
    user = env.get("SWITCHYARD_DB_OWNER_USER", "switchyard_owner")
    password = read_secret("SWITCHYARD_DB_OWNER_PASSWORD", env)
    conn = psycopg2.connect(host="127.0.0.1", port=port, user=user, password=password, dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{DB}"')
        cur.execute(f'CREATE DATABASE "{DB}"')
    conn.close()
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], check=True, env=env, cwd=ROOT)
    return f"jdbc:postgresql://127.0.0.1:{port}/{DB}?user={user}", password


def build(args, jdbc: tuple[str, str], events_dir: Path) -> tuple[int, int]:
    spark = spark_session(args.master, "trace-index-bench", shuffle_partitions=args.shuffle_partitions,
                          driver_memory="2g")
    spark.range(1000).count()  # JVM and session warm-up stays out of the figure
    if args.index_only:
        took, result = timed_run(spark, events_dir, Path(args.work) / "index-only", None)
        n = result["new_events"]
        print(f"index build alone, Parquet (read + dedupe + summaries + write): {n:,} events in {took:.1f} s "
              f"= {n / took:,.0f} events/s")
    took, result = timed_run(spark, events_dir, Path(args.work) / "index", jdbc)
    n = result["new_events"]
    print(f"whole job ({args.master}), the index and the lookups made servable (PostgreSQL load): {n:,} events "
          f"in {took:.1f} s = {n / took:,.0f} events/s")
    if args.baseline:
        baseline(spark, events_dir, Path(args.work) / "baseline")
    spark.stop()
    return n, result["messages"]


def timed_run(spark, events_dir: Path, out: Path, jdbc: tuple[str, str] | None) -> tuple[float, dict]:
    """One run of the job from nothing into `out` (and the bench database, given `jdbc`): its seconds and result.
    Also prints the CPU seconds it took, in the bench's process tree (driver, JVM, Python workers) and in
    PostgreSQL's: on a shared machine they vary less than the wall clock."""
    shutil.rmtree(out, ignore_errors=True)
    postgres = postmaster_pid(jdbc)
    cpu = cpu_seconds([os.getpid()]), cpu_seconds([postgres])
    start = time.perf_counter()

    def progress(stage, percent, **fields):
        print(f"  {time.perf_counter() - start:7.1f}s  {percent:3d}%  {stage} {fields if fields else ''}", flush=True)

    result = trace_index.run(spark, [str(events_dir)], str(out), jdbc_url=jdbc and jdbc[0],
                             jdbc_password=jdbc and jdbc[1], progress=progress)
    took = time.perf_counter() - start
    print(f"  CPU seconds (user + system): the job's processes {cpu_seconds([os.getpid()]) - cpu[0]:.1f}, "
          f"PostgreSQL {cpu_seconds([postgres]) - cpu[1]:.1f}")
    return took, result


def postmaster_pid(jdbc: tuple[str, str] | None) -> int:
    """The PostgreSQL server's process (the parent of this session's backend: the bench runs beside it)."""
    env = env_for_bench()
    conn = psycopg2.connect(host="127.0.0.1", port=env.get("SWITCHYARD_DB_PORT", "27100"), dbname=DB,
                            user=env.get("SWITCHYARD_DB_OWNER_USER", "switchyard_owner"),
                            password=read_secret("SWITCHYARD_DB_OWNER_PASSWORD", env))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            return _stat(cur.fetchone()[0])[1]  # while the backend is there
    finally:
        conn.close()


def _stat(pid: int) -> list[int]:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, ...] (state as 0)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return [0, *map(int, text[text.rindex(")") + 2:].split()[1:])]


def cpu_seconds(roots: list[int]) -> float:
    """User + system CPU seconds of `roots` and their live descendants, with the children they have reaped."""
    parents: dict[int, list[int]] = {}
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stats[int(entry)] = fields = _stat(int(entry))
            except (OSError, ValueError):
                continue
            parents.setdefault(fields[1], []).append(int(entry))
    total, todo = 0, list(roots)
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += sum(stats[pid][11:15])  # utime, stime, cutime, cstime
        todo += parents.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def baseline(spark, events_dir: Path, out: Path) -> None:
    """performance-notes.md's reference in the same run: events → groupBy message id → summary + sorted
    timeline → Parquet partitioned by date and topic (no dedupe, no incremental bookkeeping)."""
    shutil.rmtree(out, ignore_errors=True)
    files = sorted(str(p) for p in events_dir.rglob("trace-*.arrows"))
    start = time.perf_counter()
    events = read_events(spark, files)  # the trace files' records as events, by the job's own reader
    n = events.count()
    counted = time.perf_counter() - start
    start = time.perf_counter()
    (events.groupBy("message_id").agg(
        F.max("topic").alias("topic"), F.min("ts_us").alias("first_ts_us"), F.max("ts_us").alias("last_ts_us"),
        F.array_sort(F.collect_list(F.struct("ts_us", "event", "group", "attempt", "consumer"))).alias("timeline"))
     .withColumn("date", F.date_format(F.timestamp_micros("first_ts_us"), "yyyy-MM-dd"))
     .write.partitionBy("date", "topic").parquet(str(out)))
    took = time.perf_counter() - start
    print(f"baseline in the same run (groupBy → Parquet): {n:,} events in {took:.1f} s "
          f"= {n / took:,.0f} events/s (counting them first took {counted:.1f} s)")


def lookups(args, env, messages: int) -> None:
    env = {**env, "SWITCHYARD_DEBUG": "0"}
    setup = ("from datetime import timedelta;"
             "from django.contrib.auth.models import User, Group;"
             "from apps.accounts.models import ApiToken;"
             "from apps.accounts.roles import sync_role_groups; sync_role_groups();"
             "u, _ = User.objects.get_or_create(username='bench-auditor');"
             "u.groups.set(Group.objects.filter(name='auditor'));"
             "print(ApiToken.objects.create(user=u, expiry=timedelta(hours=1), name='bench')[1])")
    token = subprocess.run([sys.executable, "manage.py", "shell", "-c", setup], check=True, env=env, cwd=ROOT,
                           capture_output=True, text=True).stdout.strip().splitlines()[-1]
    web = subprocess.Popen([sys.executable, "-m", "gunicorn", "control_plane.wsgi", "-b",
                            f"127.0.0.1:{args.web_port}", "-w", "2", "--log-level", "warning"],
                           env=env, cwd=ROOT, start_new_session=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                http.client.HTTPConnection("127.0.0.1", args.web_port, timeout=1).request("GET", "/login/")
                break
            except OSError:
                time.sleep(0.2)
        conn = http.client.HTTPConnection("127.0.0.1", args.web_port, timeout=10)
        headers = {"Authorization": f"Token {token}"}
        rng = random.Random(1)

        def timed(path):
            t = time.perf_counter()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            assert response.status == 200, (response.status, body[:200])
            return (time.perf_counter() - t) * 1000

        for name, make in (("message id", lambda n: f"/api/v1/traces/messages/{message_id(n)}/"),
                           ("business id", lambda n: f"/api/v1/traces/messages/?business_id={business_id(n)}")):
            for _ in range(50):
                timed(make(rng.randrange(messages)))  # warm connections and caches
            samples = sorted(timed(make(rng.randrange(messages))) for _ in range(args.lookups))
            p50 = statistics.median(samples)
            p99 = samples[int(len(samples) * 0.99) - 1]
            print(f"lookup by {name} through REST: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(samples)} requests)")
    finally:
        os.killpg(web.pid, 15)
        web.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--master", default="local[2]", help="Spark master URL (default local[2])")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--work", default="/tmp/sy-bench")
    parser.add_argument("--web-port", type=int, default=27710)
    parser.add_argument("--lookups", type=int, default=1000)
    parser.add_argument("--skip-build", action="store_true", help="reuse the index in the bench database")
    parser.add_argument("--no-broker", dest="broker", action="store_false", help="skip the tracing on/off ratio")
    parser.add_argument("--no-index-only", dest="index_only", action="store_false",
                        help="skip the build of the Parquet index alone (without the load) before the whole job")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="skip the plain groupBy-to-Parquet reference build")
    args = parser.parse_args()
    env = env_for_bench()
    os.environ.update({k: v for k, v in env.items() if k.startswith(("SWITCHYARD_", "DJANGO_"))})
    events_dir = Path(args.work) / f"events-{args.events}-arrows"  # (the folders of Parquet trace files are not read)
    if not events_dir.exists():
        t = time.perf_counter()
        n, m = generate(events_dir, args.events)
        (events_dir / "messages.txt").write_text(str(m))
        print(f"generated {n:,} events of {m:,} messages in {time.perf_counter() - t:.0f} s")
    messages = int((events_dir / "messages.txt").read_text())
    if not args.skip_build:
        jdbc = prepare_database(env)
        build(args, jdbc, events_dir)
    lookups(args, env, messages)
    ratio = ROOT / "bench" / "broker_trace_ratio.py"
    if not args.broker:
        pass
    elif ratio.exists():
        subprocess.run([sys.executable, str(ratio)], env=env, cwd=ROOT)
    else:
        print("broker throughput tracing on/off: not measured (no broker bench yet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
