"""Make the lookups servable: load the UI's table `tracing_message` into PostgreSQL by binary COPY.

A row per message: its summary and its timeline (the index's timeline as JSON text: one row to write and to
read per message, rather than a row per event). The table belongs to the control plane (apps/tracing
models and migrations); this module only fills it. Each task of the index job that summarizes a partition
loads that partition's rows itself, right after writing them to Parquet (`load_partition`): no second pass
over the index, no Spark row. The rows are sorted by message id (index pages are then touched in order)
and sent in PostgreSQL's binary COPY format (spark_jobs.pg_copy).

- When the table was empty as the run began (a first build), a task COPYs its rows straight in. If one is
  there after all (a retried task whose first attempt had committed), that COPY is rolled back and the task
  takes the way below.
- Otherwise the task first asks which of its messages the table holds (their ids COPYed into a temporary
  table, joined with the table's primary key). The others are COPYed straight in; those are upserted
  through a temporary table of the task's session and `INSERT … ON CONFLICT DO UPDATE`, which leaves a row
  that did not change alone (`indexed_at` included).

So loading the same run twice leaves the same rows. Each task commits its own rows in one transaction (a
failed task leaves nothing behind; its retry loads again); one load at a time (an advisory lock the driver
holds for the whole run, `LoadLock`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.pg_copy import MESSAGE_COLUMNS, StreamReader, ahead, copy_stream, id_stream

MESSAGE_TABLE = "tracing_message"
_LOCK_KEY = 0x5357_5452  # "SWTR": one loader at a time
COPY_ROWS = 16384  # rows encoded at a time (while PostgreSQL reads the rows before)
# a summary that did not change keeps its row untouched (indexed_at included): re-running changes nothing
_COMPARED = [c for c in MESSAGE_COLUMNS if c not in ("message_id", "indexed_at")]
_UPSERT = f"""ON CONFLICT (message_id) DO UPDATE SET
        {", ".join(f"{c} = EXCLUDED.{c}" for c in MESSAGE_COLUMNS if c != "message_id")}
        WHERE ({", ".join(f"{MESSAGE_TABLE}.{c}" for c in _COMPARED)})
              IS DISTINCT FROM ({", ".join(f"EXCLUDED.{c}" for c in _COMPARED)})"""
_COLUMNS = ", ".join(MESSAGE_COLUMNS)


def libpq_dsn(jdbc_url: str, password: str | None = None) -> str:
    """jdbc:postgresql://host:port/db?user=u, and the password apart → a libpq connection string. A password in
    the URL is refused: the URL travels on command lines and into logs, the password must not."""
    if not jdbc_url.startswith("jdbc:postgresql://"):
        raise ValueError(f"not a PostgreSQL JDBC URL: {jdbc_url.split('?')[0]!r}")
    url = urlparse(jdbc_url[len("jdbc:"):])
    params = {k: v[0] for k, v in parse_qs(url.query).items()}
    if "password" in params or url.password:
        raise ValueError("the JDBC URL carries a password: give it apart (SWITCHYARD_JDBC_PASSWORD_FILE, a mode-600 "
                         "file), never in the URL")
    parts = {"host": url.hostname or "127.0.0.1", "port": str(url.port or 5432), "dbname": url.path.lstrip("/"),
             "user": params.get("user", ""), "password": password or ""}
    return " ".join(f"{k}='{_libpq_quote(v)}'" for k, v in parts.items() if v)


def _libpq_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


@dataclass(frozen=True)
class LoadTarget:
    """What a task needs to load its rows: where (a libpq connection string, password included: it travels in
    the task's closure, never in a URL or a log), whether the table was empty as the run began, and the
    run's `indexed_at` (microseconds)."""

    dsn: str
    table_was_empty: bool
    indexed_at_us: int

    def __repr__(self) -> str:  # never show the password
        return f"LoadTarget(table_was_empty={self.table_was_empty})"


class LoadLock:
    """The driver's session for the whole run: holds the advisory lock (one load at a time) and says whether
    the table is empty. Closing it ends the session, so the lock too."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [_LOCK_KEY])
            if not cur.fetchone()[0]:
                self.conn.close()
                raise RuntimeError("another trace index load is running; try again when it has finished")

    def target(self) -> LoadTarget:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {MESSAGE_TABLE}), "
                        "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
            empty, now_us = cur.fetchone()
        return LoadTarget(self.dsn, empty, now_us)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> LoadLock:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_partition(summaries: pa.Table, target: LoadTarget) -> dict:
    """Load a task's summary rows (trace_arrow.SUMMARY_SCHEMA) in one transaction. Returns the rows COPYed
    straight in, the rows upserted and the seconds it took."""
    if summaries.num_rows == 0:
        return {"copied_rows": 0, "upserted_rows": 0, "load_s": 0.0}
    start = time.perf_counter()
    rows = summaries.sort_by("message_id")
    conn = psycopg2.connect(target.dsn)
    try:
        with conn.cursor() as cur:
            loaded = None
            if target.table_was_empty:
                try:
                    _copy(cur, MESSAGE_TABLE, rows, target)
                    loaded = {"copied_rows": rows.num_rows, "upserted_rows": 0}
                except psycopg2.errors.UniqueViolation:
                    conn.rollback()
            if loaded is None:
                held = pc.is_in(rows["message_id"], value_set=_held_ids(cur, rows["message_id"]))
                new, old = rows.filter(pc.invert(held)), rows.filter(held)
                if new.num_rows:
                    _copy(cur, MESSAGE_TABLE, new, target)
                if old.num_rows:
                    _upsert(cur, old, target)
                loaded = {"copied_rows": new.num_rows, "upserted_rows": old.num_rows}
        conn.commit()
    finally:
        conn.close()
    return {**loaded, "load_s": time.perf_counter() - start}


def _copy(cur, table: str, rows: pa.Table, target: LoadTarget) -> None:
    stream = ahead(copy_stream(rows, target.indexed_at_us, COPY_ROWS))
    try:
        cur.copy_expert(f"COPY {table} ({_COLUMNS}) FROM STDIN WITH (FORMAT binary)", StreamReader(stream),
                        size=1 << 20)
    finally:
        stream.close()  # stops its encoder thread if the COPY failed


def _held_ids(cur, ids) -> pa.Array:
    """Which of `ids` the table holds."""
    cur.execute("CREATE TEMPORARY TABLE load_ids (message_id varchar) ON COMMIT DROP")
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    cur.copy_expert("COPY load_ids FROM STDIN WITH (FORMAT binary)", StreamReader(id_stream(ids)), size=1 << 20)
    cur.execute("ANALYZE load_ids")
    cur.execute(f"SELECT message_id FROM {MESSAGE_TABLE} WHERE message_id IN (SELECT message_id FROM load_ids)")
    return pa.array([r[0] for r in cur.fetchall()], pa.string())


def _upsert(cur, rows: pa.Table, target: LoadTarget) -> None:
    """Rows the table holds: through a temporary table, then INSERT … ON CONFLICT (unchanged rows untouched)."""
    cur.execute(f"CREATE TEMPORARY TABLE load_rows (LIKE {MESSAGE_TABLE}) ON COMMIT DROP")
    _copy(cur, "load_rows", rows, target)
    cur.execute(f"INSERT INTO {MESSAGE_TABLE} ({_COLUMNS}) SELECT {_COLUMNS} FROM load_rows ORDER BY message_id "
                f"{_UPSERT}")
