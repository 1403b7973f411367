"""The load into PostgreSQL on its own: summary rows in binary COPY format into the real `tracing_message`,
read back through the model and the API's reader, fresh rows COPYed, rows already there upserted."""

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from django.db import connection

from apps.tracing.models import TracedMessage
from apps.tracing.queries import group_states, timeline_of
from apps.tracing.runner import jdbc_password, jdbc_url
from spark_jobs.password import PasswordFileError, read_password_file
from spark_jobs.pg_copy import copy_stream
from spark_jobs.pg_load import LoadLock, LoadTarget, libpq_dsn, load_partition
from spark_jobs.trace_arrow import SUMMARY_SCHEMA

pytestmark = pytest.mark.django_db(transaction=True)

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def event(event_id, ts_us, rank, event, **fields):
    return {"ts_us": ts_us, "rank": rank, "event_id": event_id, "group": None, "event": event, "attempt": None,
            "consumer": None, "client_host": None, "broker": None, "app_id": None, "detail": None, "size": None,
            **fields}


def summary(message_id, timeline, **fields):
    row = {"message_id": message_id, "topic": "orders", "message_type": "normal", "key": None, "business_id": None,
           "cluster": "prod-a", "app_id": None, "producer_host": None, "broker": None, "size": None,
           "first_ts_us": timeline[0]["ts_us"], "last_ts_us": timeline[-1]["ts_us"], "published_ts_us": None,
           "stored_ts_us": None, "transaction_state": None, "final_state": "published", "final_states": ["published"],
           "attempts": 0, "event_count": len(timeline), "groups": [], "date": "2026-01-01", "timeline": timeline}
    return {**row, **fields}


def table(*rows):
    return pa.Table.from_pylist(list(rows), schema=SUMMARY_SCHEMA)


AWKWARD = 'say "hi" \\ then\nnewline\ttab \x01 ünïcødé ✓'
GROUP = {"group": "billing", "state": "acked", "attempts": 1, "deliveries": 1, "nacks": 0, "timeouts": 0,
         "first_delivered_us": T0 + 10, "ended_us": T0 + 12, "latency_us": 12, "last_consumer": 'c"1', "detail": None}
ROWS = table(
    summary("m-1", [event("e1", T0, 0, "published", app_id="shop", client_host="10.0.0.1:5000", size=1024),
                    event("e2", T0 + 1, 2, "stored", broker="node-1"),
                    event("e3", T0 + 10, 5, "delivered", group="billing", consumer='c"1', attempt=1),
                    event("e4", T0 + 12, 8, "acked", group="billing", consumer='c"1', attempt=1, detail=AWKWARD)],
            key="cust-1", business_id="order-1", app_id="shop", producer_host="10.0.0.1:5000", broker="node-1",
            size=1024, published_ts_us=T0, stored_ts_us=T0 + 1, final_state="acked", final_states=["acked"],
            attempts=1, groups=[GROUP]),
    summary("m-2", [event("e5", T0 + 20, 1, "prepared")], message_type="transaction", business_id=AWKWARD,
            transaction_state="prepared", final_state="prepared", final_states=[]),
    summary("m-3", [event("e6", T0 + 30, 0, "published")], final_states=["in_flight", "retrying"]),
)


def target(empty: bool) -> LoadTarget:
    return LoadTarget(libpq_dsn(jdbc_url(), jdbc_password()), empty, T0)


def snapshot():
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM tracing_message ORDER BY message_id")
        return cur.fetchall()


def test_rows_arrive_as_written_with_their_timelines_in_json():
    assert load_partition(ROWS, target(empty=True))["copied_rows"] == 3
    m1 = TracedMessage.objects.get(message_id="m-1")
    assert (m1.key, m1.business_id, m1.size, m1.attempts, m1.event_count, m1.final_states) == (
        "cust-1", "order-1", 1024, 1, 4, ["acked"])
    assert (m1.first_at.isoformat(), m1.stored_at.isoformat()) == (
        "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00.000001+00:00")
    assert m1.groups == [GROUP] and group_states(m1) == {"billing": "acked"}
    # the timeline is JSON text, a null field left out; strings of every kind come back as they were
    assert json.loads(m1.timeline)[1] == {"ts_us": T0 + 1, "rank": 2, "event_id": "e2", "event": "stored",
                                          "broker": "node-1"}
    assert [(e.event, e.group_name, e.consumer, e.attempt, e.detail) for e in timeline_of(m1)] == [
        ("published", None, None, None, None), ("stored", None, None, None, None),
        ("delivered", "billing", 'c"1', 1, None), ("acked", "billing", 'c"1', 1, AWKWARD)]
    m2 = TracedMessage.objects.get(message_id="m-2")
    assert (m2.business_id, m2.key, m2.size, m2.published_at, m2.final_states, m2.groups) == (
        AWKWARD, None, None, None, [], [])
    assert TracedMessage.objects.get(message_id="m-3").final_states == ["in_flight", "retrying"]


def test_the_stream_is_the_same_however_it_is_cut():
    whole = b"".join(bytes(chunk) for chunk in copy_stream(ROWS, T0, chunk_rows=100))
    assert b"".join(bytes(chunk) for chunk in copy_stream(ROWS, T0, chunk_rows=1)) == whole
    assert b"".join(bytes(chunk) for chunk in copy_stream(ROWS.slice(1), T0, chunk_rows=1)) == b"".join(
        bytes(chunk) for chunk in copy_stream(table(*ROWS.slice(1).to_pylist()), T0))


def test_rows_already_there_are_upserted_and_the_others_copied():
    load_partition(ROWS.slice(0, 2), target(empty=True))
    before = snapshot()
    # the same rows again, as a retried task whose first attempt had committed (the table was empty at start)
    assert load_partition(ROWS.slice(0, 2), target(empty=True))["upserted_rows"] == 2
    assert snapshot() == before

    # m-1 goes on in a later run, m-3 is new: only m-1 goes through the upsert, and m-2 is left alone
    later = ROWS.to_pylist()
    later[0] = {**later[0], "final_state": "dead_lettered", "final_states": ["dead_lettered"],
                "event_count": 5, "timeline": [*later[0]["timeline"], event("e9", T0 + 99, 9, "dead_lettered")]}
    loaded = load_partition(table(later[0], later[2]), target(empty=False))
    assert (loaded["copied_rows"], loaded["upserted_rows"]) == (1, 1)
    m1 = TracedMessage.objects.get(message_id="m-1")
    assert (m1.final_state, m1.event_count, [e.event_id for e in timeline_of(m1)][-1]) == ("dead_lettered", 5, "e9")
    assert snapshot()[1] == before[1]
    assert TracedMessage.objects.count() == 3


def test_one_load_at_a_time():
    dsn = libpq_dsn(jdbc_url(), jdbc_password())
    with LoadLock(dsn) as lock:
        assert lock.target().table_was_empty
        with pytest.raises(RuntimeError, match="another trace index load is running"):
            LoadLock(dsn)
    LoadLock(dsn).close()  # the lock went with the first session


def test_the_password_file_must_be_private(tmp_path):
    path = Path(tmp_path / "password")
    path.write_text("s3cret\n")
    os.chmod(path, 0o644)
    with pytest.raises(PasswordFileError, match="may be read by other users; run `chmod 600"):
        read_password_file(path)
    os.chmod(path, 0o600)
    assert read_password_file(path) == "s3cret"
    with pytest.raises(PasswordFileError, match="cannot read"):
        read_password_file(tmp_path / "missing")
