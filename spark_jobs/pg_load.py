"""Make the lookups servable: load the UI's table `tracing_message` into PostgreSQL by COPY.

A row per message: its summary and its timeline (the index's timeline as JSON text: one row to write and to
read per message, rather than a row per event). The table belongs to the control plane (apps/tracing
models and migrations); this module only fills it. The executors COPY their partitions through psycopg2,
each partition sorted by message id (index pages are then touched in order) and written as CSV by
pyarrow's C++ writer: no per-row Python.

- Messages the index did not hold before (all of them in a first build) go straight into the table: no
  staging copy and no merge to pay. If a partition meets a row already there (a run that failed after
  loading, done again), its COPY is rolled back and the partition takes the way below.
- Messages the run touched again go through a temporary table of the task's session, then one
  `INSERT … ON CONFLICT DO UPDATE`; a row that did not change is left alone (`indexed_at` included).

So loading the same run twice leaves the same rows. Each task commits its own rows; one load at a time
(an advisory lock).
"""

from __future__ import annotations

import io
import logging
from urllib.parse import parse_qs, urlparse

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pyarrow.csv as pacsv
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

log = logging.getLogger("spark_jobs.pg_load")

MESSAGE_TABLE = "tracing_message"
_LOCK_KEY = 0x5357_5452  # "SWTR": one loader at a time
COPY_ROWS = 65536  # rows per COPY statement

_SUMMARY_COLUMNS = ["message_id", "topic", "message_type", "key", "business_id", "cluster", "app_id", "producer_host",
                    "broker", "size"]
_TIMES = {"first_at": "first_ts_us", "last_at": "last_ts_us", "published_at": "published_ts_us",
          "stored_at": "stored_ts_us"}
_STATES = ["transaction_state", "final_state", "final_states", "attempts", "event_count", "groups", "timeline",
           "indexed_at"]
MESSAGE_COLUMNS = [*_SUMMARY_COLUMNS, *_TIMES, *_STATES]
# a summary that did not change keeps its row untouched (indexed_at included): re-running changes nothing
_COMPARED = [c for c in MESSAGE_COLUMNS if c not in ("message_id", "indexed_at")]
_UPSERT = f"""ON CONFLICT (message_id) DO UPDATE SET
        {", ".join(f"{c} = EXCLUDED.{c}" for c in MESSAGE_COLUMNS if c != "message_id")}
        WHERE ({", ".join(f"{MESSAGE_TABLE}.{c}" for c in _COMPARED)})
              IS DISTINCT FROM ({", ".join(f"EXCLUDED.{c}" for c in _COMPARED)})"""


def message_rows(messages: DataFrame) -> DataFrame:
    """The columns of `tracing_message` (times as timestamps, final states as an array literal, groups and the
    timeline as JSON: a timeline event's fields that are null are left out)."""
    return messages.select(
        *_SUMMARY_COLUMNS,
        *[F.timestamp_micros(us).alias(name) for name, us in _TIMES.items()],
        "transaction_state", "final_state",
        F.concat(F.lit("{"), F.concat_ws(",", "final_states"), F.lit("}")).alias("final_states"),
        "attempts", "event_count",
        F.to_json("groups", {"ignoreNullFields": "false"}).alias("groups"),
        F.to_json("timeline").alias("timeline"),
        F.current_timestamp().alias("indexed_at"),
    )


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


def _copy_rows(cur, table: str, rows: pa.Table) -> None:
    sql = f"COPY {table} ({', '.join(rows.column_names)}) FROM STDIN WITH (FORMAT csv)"
    for batch in rows.to_batches(max_chunksize=COPY_ROWS):
        buffer = io.BytesIO()
        # nulls are written as nothing, empty strings as "": what COPY's CSV format reads back
        pacsv.write_csv(batch, buffer, write_options=pacsv.WriteOptions(include_header=False))
        buffer.seek(0)
        cur.copy_expert(sql, buffer)


def _upsert(cur, rows: pa.Table) -> None:
    """Rows some of which may be in the table already: through a temporary table, then INSERT … ON CONFLICT."""
    cur.execute(f"CREATE TEMPORARY TABLE load_rows (LIKE {MESSAGE_TABLE}) ON COMMIT DROP")
    _copy_rows(cur, "load_rows", rows)
    columns = ", ".join(rows.column_names)
    cur.execute(f"INSERT INTO {MESSAGE_TABLE} ({columns}) SELECT {columns} FROM load_rows ORDER BY message_id "
                f"{_UPSERT}")


def copy_into(df: DataFrame, dsn: str, *, fresh: bool) -> dict:
    """Load every partition of `df` (message_rows) from the executors, one connection and one transaction per
    task (a failed task leaves nothing behind; its retry loads it again). `fresh`: rows not expected in the
    table, COPYed straight into it (upserted if one is there after all). Returns the rows loaded and the
    partitions that were upserted."""

    def load(batches):
        batches = [b for b in batches if b.num_rows]
        upserted = rows = 0
        if batches:
            table_rows = pa.Table.from_batches(batches).sort_by("message_id")
            rows = table_rows.num_rows
            conn = psycopg2.connect(dsn)
            try:
                upserted = int(_load(conn, table_rows, fresh))
                conn.commit()
            finally:
                conn.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows], "upserted": [upserted]})

    totals = df.mapInArrow(load, "rows long, upserted long").agg(
        F.coalesce(F.sum("rows"), F.lit(0)).alias("rows"), F.coalesce(F.sum("upserted"), F.lit(0)).alias("upserted"))
    return totals.first().asDict()


def _load(conn, rows: pa.Table, fresh: bool) -> bool:
    """COPY `rows` into the table if `fresh`, else (or if one is there after all) upsert them. Returns whether
    they were upserted."""
    with conn.cursor() as cur:
        if fresh:
            try:
                _copy_rows(cur, MESSAGE_TABLE, rows)
                return False
            except psycopg2.errors.UniqueViolation:
                conn.rollback()
        _upsert(cur, rows)
        return True


def load_lookup_tables(messages: DataFrame, jdbc_url: str, *, password: str | None = None,
                       indexed_before: DataFrame | None = None, progress=None) -> dict:
    """Load the summaries and timelines of `messages` (those a run updated); `indexed_before`: the ids of
    those the index held before the run (upserted), the others are COPYed straight in."""
    dsn = libpq_dsn(jdbc_url, password)
    if indexed_before is None:
        parts = [(messages, True)]
    else:
        parts = [(messages.join(indexed_before, "message_id", "left_anti"), True),
                 (messages.join(indexed_before, "message_id", "left_semi"), False)]
    conn = psycopg2.connect(dsn)  # holds the advisory lock for the whole load
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [_LOCK_KEY])
            if not cur.fetchone()[0]:
                raise RuntimeError("another trace index load is running")
        loaded = {"message_rows": 0, "upserted_partitions": 0}
        for part, fresh in parts:
            done = copy_into(message_rows(part), dsn, fresh=fresh)
            loaded["message_rows"] += done["rows"]
            loaded["upserted_partitions"] += done["upserted"]
            if progress:
                progress("loaded new messages" if fresh else "upserted the messages indexed before")
        return loaded
    finally:
        conn.close()  # ends the session, so its advisory lock too
