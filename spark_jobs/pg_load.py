"""Load the UI's lookup tables into PostgreSQL: COPY into staging tables, then one idempotent SQL merge.

The tables belong to the control plane (apps/tracing models and migrations, staging tables included);
this module only fills them. The executors COPY their partitions into the staging tables through
psycopg2 (each Arrow batch written as CSV by pyarrow's C++ writer: no per-row Python). The driver
then merges them in one transaction under an advisory lock, in key order (index pages are touched in
order), so a reader sees a message's old summary and timeline or its new ones, never a mix.
Summaries are upserted by message_id and events inserted unless (message_id, event_id) is there, so
loading the same run twice (a run that failed after loading) leaves the same rows.
"""

from __future__ import annotations

import io
import logging
from urllib.parse import parse_qs, urlparse

import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.trace_transforms import summary_rows, timeline_rows

log = logging.getLogger("spark_jobs.pg_load")

MESSAGE_TABLE = "tracing_message"
EVENT_TABLE = "tracing_event"
MESSAGE_STAGING = "tracing_message_staging"
EVENT_STAGING = "tracing_event_staging"
_LOCK_KEY = 0x5357_5452  # "SWTR": one loader at a time

_TS = "'epoch'::timestamptz + {col} * interval '1 microsecond'"
_MESSAGE_COPY = {
    "message_id": "message_id", "topic": "topic", "message_type": "message_type", "key": "key",
    "business_id": "business_id", "cluster": "cluster", "app_id": "app_id", "producer_host": "producer_host",
    "broker": "broker", "size": "size",
    "first_at": _TS.format(col="first_ts_us"), "last_at": _TS.format(col="last_ts_us"),
    "published_at": _TS.format(col="published_ts_us"), "stored_at": _TS.format(col="stored_ts_us"),
    "transaction_state": "transaction_state", "final_state": "final_state",
    "final_states": "string_to_array(final_states, ',')", "attempts": "attempts", "event_count": "event_count",
    "groups": "groups::jsonb", "indexed_at": "now()",
}
_EVENT_COPY = {
    "message_id": "message_id", "event_id": "event_id", "ts_us": "ts_us", "rank": "rank",
    "at": _TS.format(col="ts_us"), "event": "event", "group_name": '"group"', "attempt": "attempt",
    "consumer": "consumer", "client_host": "client_host", "broker": "broker", "app_id": "app_id",
    "detail": "detail", "size": "size",
}

# a summary that did not change keeps its row untouched (indexed_at included): re-running changes nothing
_COMPARED = [c for c in _MESSAGE_COPY if c not in ("message_id", "indexed_at")]

MERGE_SQL = [
    f"""INSERT INTO {MESSAGE_TABLE} ({", ".join(_MESSAGE_COPY)})
        SELECT DISTINCT ON (message_id) {", ".join(_MESSAGE_COPY.values())} FROM {MESSAGE_STAGING} ORDER BY message_id
        ON CONFLICT (message_id) DO UPDATE SET
        {", ".join(f"{c} = EXCLUDED.{c}" for c in _MESSAGE_COPY if c != "message_id")}
        WHERE ({", ".join(f"{MESSAGE_TABLE}.{c}" for c in _COMPARED)})
              IS DISTINCT FROM ({", ".join(f"EXCLUDED.{c}" for c in _COMPARED)})""",
    f"""INSERT INTO {EVENT_TABLE} ({", ".join(_EVENT_COPY)})
        SELECT {", ".join(_EVENT_COPY.values())} FROM {EVENT_STAGING} ORDER BY message_id, event_id
        ON CONFLICT (message_id, event_id) DO NOTHING""",
    f"TRUNCATE {MESSAGE_STAGING}, {EVENT_STAGING}",
]


def libpq_dsn(jdbc_url: str, password: str | None = None) -> str:
    """jdbc:postgresql://host:port/db?user=u, and the password apart → a libpq connection string. A password in
    the URL is refused: the URL travels on command lines and into logs, the password must not."""
    if not jdbc_url.startswith("jdbc:postgresql://"):
        raise ValueError(f"not a PostgreSQL JDBC URL: {jdbc_url.split('?')[0]!r}")
    url = urlparse(jdbc_url[len("jdbc:"):])
    params = {k: v[0] for k, v in parse_qs(url.query).items()}
    if "password" in params or url.password:
        raise ValueError("the JDBC URL carries a password: give it apart (SWITCHYARD_JDBC_PASSWORD_FILE, a mode-600 "
                         "file, or SWITCHYARD_JDBC_PASSWORD), never in the URL")
    parts = {"host": url.hostname or "127.0.0.1", "port": str(url.port or 5432), "dbname": url.path.lstrip("/"),
             "user": params.get("user", ""), "password": password or ""}
    return " ".join(f"{k}='{_libpq_quote(v)}'" for k, v in parts.items() if v)


def _libpq_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _copy(df: DataFrame, dsn: str, table: str) -> int:
    """COPY every partition of `df` into `table` from the executors (one connection per task, one
    transaction per task: a failed task's rows are not left behind, its retry copies them again)."""
    columns = ", ".join(f'"{c}"' for c in df.columns)
    sql = f"COPY {table} ({columns}) FROM STDIN WITH (FORMAT csv)"

    def copy(batches):
        rows = 0
        conn = psycopg2.connect(dsn)
        try:
            with conn.cursor() as cur:
                for batch in batches:
                    if not batch.num_rows:
                        continue
                    buffer = io.BytesIO()
                    # nulls are written as nothing, empty strings as "": what COPY's CSV format reads back
                    pacsv.write_csv(batch, buffer, write_options=pacsv.WriteOptions(include_header=False))
                    buffer.seek(0)
                    cur.copy_expert(sql, buffer)
                    rows += batch.num_rows
            conn.commit()
        finally:
            conn.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows]})

    return df.mapInArrow(copy, "rows long").agg(F.sum("rows")).first()[0] or 0


def load_lookup_tables(messages: DataFrame, jdbc_url: str, *, password: str | None = None, progress=None) -> dict:
    """Upsert the summaries of `messages` (those a run updated) and add the events of their timelines that
    are not there yet."""
    dsn = libpq_dsn(jdbc_url, password)
    conn = psycopg2.connect(dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [_LOCK_KEY])
            if not cur.fetchone()[0]:
                raise RuntimeError("another trace index load is running")
            cur.execute(f"TRUNCATE {MESSAGE_STAGING}, {EVENT_STAGING}")  # leftovers of an interrupted load
        for rows, table, what in ((summary_rows(messages), MESSAGE_STAGING, "summary"),
                                  (timeline_rows(messages), EVENT_STAGING, "timeline")):
            _copy(rows, dsn, table)
            if progress:
                progress(f"loaded {what} rows into staging")
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {MESSAGE_STAGING}")
            message_rows = cur.fetchone()[0]
            cur.execute(f"SELECT count(*) FROM {EVENT_STAGING}")
            event_rows = cur.fetchone()[0]
            for statement in MERGE_SQL:
                cur.execute(statement)
        conn.commit()
        return {"message_rows": message_rows, "event_rows": event_rows}
    finally:
        conn.close()  # ends the session, so its advisory lock too
