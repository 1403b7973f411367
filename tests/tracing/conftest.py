"""Fixtures of the tracing tests: one Spark session for the whole run, trace files written by the broker's writer."""

from __future__ import annotations

import pytest
from django.db import connections

from broker_core.tracing.writer import TraceFileWriter
from spark_jobs.session import spark_session

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds


@pytest.fixture(scope="session")
def spark():
    session = spark_session("local[2]", "switchyard-tests", shuffle_partitions=2)
    yield session
    session.stop()


class TraceBatch:
    """Write one batch of trace files (one closed file per call of `close`) as a broker node would."""

    def __init__(self, folder, node: str = "node-1", cluster: str = "prod-a"):
        self.writer = TraceFileWriter(folder, node_id=node, cluster=cluster)

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


@pytest.fixture
def request_threads_close_their_connections():
    """The live server answers each request on a new thread; with CONN_MAX_AGE its connection would
    outlive the thread and keep the test database from being dropped."""
    saved = connections.settings["default"].get("CONN_MAX_AGE")
    connections.settings["default"]["CONN_MAX_AGE"] = 0
    yield
    connections.settings["default"]["CONN_MAX_AGE"] = saved
