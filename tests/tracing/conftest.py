"""Fixtures of the tracing tests: one Spark session for the whole run, trace files written by the broker's writer."""

from __future__ import annotations

import pytest

from broker_core.trace_writer import JsonlTraceWriter

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.session import POSTGRES_JDBC_JAR, spark_session

    session = spark_session("local[2]", "switchyard-tests", shuffle_partitions=2, jars=[POSTGRES_JDBC_JAR])
    yield session
    session.stop()


class TraceBatch:
    """Write one batch of trace files (one closed file per call of `close`) as a broker node would."""

    def __init__(self, folder, node: str = "node-1", cluster: str = "prod-a"):
        self.writer = JsonlTraceWriter(folder, node_id=node, cluster=cluster, flush_interval_s=3600)

    def emit(self, event: str, message_id: str, at_ms: float, topic: str = "orders", **fields):
        self.writer.emit(event, message_id=message_id, topic=topic, message_type=fields.pop("message_type", "normal"),
                         ts_us=T0 + int(at_ms * 1000), **fields)
        return self

    def close(self):
        self.writer.close()


@pytest.fixture
def trace_batch(tmp_path):
    def make(node: str = "node-1"):
        return TraceBatch(tmp_path / "brokers" / node / "trace", node=node)

    return make


@pytest.fixture(scope="session")
def trace_dirs(tmp_path_factory):
    """The broker trace folder and index folder the Celery worker's index builds use."""
    root = tmp_path_factory.mktemp("tracing-worker")
    return {"inputs": root / "brokers", "index": root / "index", "state": root / "state"}


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker, trace_dirs):
    """A real `celery worker --pool=solo` on the test database and Redis; its index builds run real Spark."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from django.db import connection

    from control_plane.celery import app

    with django_db_blocker.unblock():
        test_db = connection.settings_dict["NAME"]
    app.control.purge()
    for folder in trace_dirs.values():
        folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SWITCHYARD_DB_NAME": test_db, "SWITCHYARD_STATE": str(trace_dirs["state"]),
           "SWITCHYARD_TRACE_INPUTS": str(trace_dirs["inputs"]), "SWITCHYARD_TRACE_INDEX_DIR": str(trace_dirs["index"]),
           "SWITCHYARD_SPARK_MASTER": "local[2]"}
    log_path = trace_dirs["state"] / "celery-worker.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "control_plane", "worker", "--pool=solo", "-l", "info",
             "-n", f"tracing-test-{os.getpid()}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=Path(__file__).resolve().parents[2], env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if app.control.ping(timeout=0.5):
                    break
            except Exception:
                pass
        if proc.poll() is not None or time.monotonic() >= deadline:
            raise RuntimeError(f"the Celery worker did not start; see {log_path}")
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # its database session ends a moment after the process: let it go before the test database is dropped
        with django_db_blocker.unblock():
            with connection.cursor() as cur:
                for _ in range(100):
                    cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                                [test_db])
                    if cur.fetchone()[0] == 0:
                        break
                    time.sleep(0.1)
