"""The trace index job: read new trace files → build and merge message timelines → write Parquet → load PostgreSQL.

    python -m spark_jobs.trace_index --input DIR [DIR ...] --output DIR [--master URL] [--jdbc-url URL]

The database password never comes on the command line: SWITCHYARD_JDBC_PASSWORD_FILE names a mode-600 file
holding it (spark_jobs.password).

Incremental: only closed trace files not in the checkpoint are read. Idempotent: a message already indexed
is summarized again from its indexed timeline and its new events together, each event once (by group and
event id), into its one row, so running again over the same files changes nothing. Progress goes to stdout
as one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import functions as F

from broker_core.tracing.schema import event_count
from spark_jobs.index_store import IndexStore, write_partitioned
from spark_jobs.password import jdbc_password as password_from_file
from spark_jobs.pg_load import LoadLock, LoadTarget, libpq_dsn, load_partition
from spark_jobs.progress import watched
from spark_jobs.session import spark_session
from spark_jobs.trace_arrow import summarize_table
from spark_jobs.trace_read import file_buckets
from spark_jobs.trace_transforms import (
    bucket_count,
    bucket_events,
    shuffle,
    summary_schema,
    timeline_events,
    to_buckets,
)

Progress = Callable[..., None]


def print_progress(stage: str, percent: int, **fields) -> None:
    print(json.dumps({"stage": stage, "percent": percent, **fields}), flush=True)


def run(spark, inputs: list[str], output: str, *, jdbc_url: str | None = None, jdbc_password: str | None = None,
        full: bool = False, progress: Progress = print_progress) -> dict:
    store = IndexStore(output)
    with store.locked():
        recovered = store.recover()
        if recovered:
            progress("finished the commit of an interrupted run", 2, run_id=recovered["run_id"])
        store.discard_staging()
        done = set() if full else store.indexed_files()
        files = [f for f in store.trace_files(inputs) if f not in done]
        progress("listed trace files", 5, new_files=len(files), indexed_before=len(done))
        if not files:
            return {"new_files": 0, "messages": 0, "new_events": 0, "replaced_files": 0}
        run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        staging = store.staging(run_id)

        # read: the new events, plus the indexed timelines of the messages they touch (copy on write);
        # transform + write + load: one shuffle (by message id); each task makes the summary rows (with their
        # timelines) of its messages, writes them to Parquet and loads them into PostgreSQL; the untouched rows
        # of rewritten files are copied as they are
        partitions = partition_count(spark, files)
        steps = {"reading trace files": len(files),
                 "summarizing, writing the index" + (" and loading PostgreSQL" if jdbc_url else ""): partitions}
        with (LoadLock(libpq_dsn(jdbc_url, jdbc_password)) if jdbc_url else nullcontext()) as lock, \
                watched(spark, progress, steps, 5, 90) as watcher:
            read_files, summarized = (watcher.counter(step) for step in steps)
            buckets = bucket_count(partitions)
            blobs = file_buckets(spark, files, buckets, read_files)
            replaced: list[str] = []
            hits = untouched = None
            if store.has_index():
                blobs, hits, replaced, untouched = _touched(spark, store, blobs, buckets)
                progress("found indexed messages with new events", watcher.percent(),
                         summary_files_to_rewrite=len(replaced))
            target = lock.target() if lock else None
            written = write_summaries(shuffle(blobs, partitions), str(staging / "messages"), run_id, target,
                                      summarized)
            if untouched is not None:
                (untouched.select(*summary_schema().fieldNames()).write.partitionBy("date", "topic")
                 .mode("append").parquet(str(staging / "messages")))
            events_before = hits.agg(F.coalesce(F.sum("event_count"), F.lit(0))).first()[0] if hits is not None else 0
        counts = {"new_events": written["events"] - events_before, "messages": written["messages"]}
        loaded = {k: written[k] for k in ("copied_rows", "upserted_rows")} if target else {}
        timings = {k: round(written[k], 1) for k in ("summarize_s", "write_s", "load_s")}
        progress("wrote the message summaries and timelines" + (" and loaded them" if target else ""), 90,
                 **counts, **loaded, task_seconds=timings)
        store.commit(run_id, replaced, files)
        result = {"new_files": len(files), "replaced_files": len(replaced), "run_id": run_id, **counts}
        progress("committed", 100, **result)
        return result


def _touched(spark, store: IndexStore, blobs, buckets: int):
    """The messages of the new events that the index holds already: the blobs with their indexed timelines
    added, those messages' rows (id, event count, file), the files holding them (to rewrite) and the other
    rows of those files (copied as they are)."""
    blobs = blobs.persist()
    keys = blobs.mapInArrow(_message_keys, "message_id string, topic string").persist()
    batch_ids = keys.select("message_id").distinct().persist()
    topics = [r.topic for r in keys.select("topic").distinct().collect()]
    hits = (spark.read.parquet(str(store.messages))
            .select("message_id", "event_count", F.col("_metadata.file_path").alias("file"))
            .where(F.col("topic").isin(topics))
            .join(batch_ids, "message_id", "left_semi").persist())
    replaced = [r.file for r in hits.select("file").distinct().collect()]
    untouched = None
    if replaced:
        indexed = spark.read.option("basePath", str(store.messages)).parquet(*replaced)
        untouched = indexed.join(hits.select("message_id"), "message_id", "left_anti")
        blobs = blobs.unionByName(to_buckets(timeline_events(
            indexed.join(hits.select("message_id"), "message_id", "left_semi")), buckets))
    return blobs, hits, replaced, untouched


# events per shuffle partition, at most: one partition's events are summarized in one Arrow table
PARTITION_EVENTS = 1_000_000


def partition_count(spark, files: list[str]) -> int:
    """The shuffle's partitions: spark.sql.shuffle.partitions, more when the files hold more than
    PARTITION_EVENTS events per partition (counted from the files' record counts)."""
    estimate = sum(event_count(f) for f in files if os.path.exists(f))
    return max(int(spark.conf.get("spark.sql.shuffle.partitions")), -(-estimate // PARTITION_EVENTS))


def _message_keys(batches):
    """mapInArrow: the (message id, topic) pairs of bucket blobs."""
    events = bucket_events(batches)
    if events is not None:
        yield from events.group_by(["message_id", "topic"]).aggregate([]).to_batches()


def write_summaries(blobs, directory: str, run_id: str, target: LoadTarget | None = None, done=None) -> dict:
    """Summarize shuffled bucket blobs (trace_arrow.summarize_table), write each task's rows under `directory`
    (index_store.write_partitioned, files named after the task's partition and the run) and, given a
    `target`, load them into PostgreSQL (pg_load.load_partition); `done`: an accumulator counting the tasks
    done (progress). Returns the files, messages and events written, the rows loaded and the seconds the
    tasks spent on each step in all."""

    def write(batches):
        started = time.perf_counter()
        events = bucket_events(batches)
        table = summarize_table(events) if events is not None else None
        out = dict.fromkeys(_TOTALS, 0)
        if table is not None and table.num_rows:
            summarized = time.perf_counter()
            name = f"part-{TaskContext.get().partitionId():05d}-{run_id}"
            out["files"] = write_partitioned(table, directory, name)
            out["messages"], out["events"] = table.num_rows, pc.sum(table["event_count"]).as_py()
            out["summarize_s"], out["write_s"] = summarized - started, time.perf_counter() - summarized
            if target is not None:
                out.update(load_partition(table, target))
        if done is not None:
            done.add(1)
        yield pa.RecordBatch.from_pydict({k: [out[k]] for k in _TOTALS}, schema=_TOTALS_SCHEMA)

    totals = (blobs.mapInArrow(write, ", ".join(f"{f.name} {'double' if f.type == pa.float64() else 'long'}"
                                                 for f in _TOTALS_SCHEMA))
              .agg(*[F.coalesce(F.sum(c), F.lit(0)).alias(c) for c in _TOTALS]).first())
    return totals.asDict()


_TOTALS = ["files", "messages", "events", "copied_rows", "upserted_rows", "summarize_s", "write_s", "load_s"]
_TOTALS_SCHEMA = pa.schema([(k, pa.float64() if k.endswith("_s") else pa.int64()) for k in _TOTALS])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.trace_index", description=__doc__.split("\n")[0])
    parser.add_argument("--input", nargs="+", required=True, help="trace folders (each broker's <data dir>/trace)")
    parser.add_argument("--output", required=True, help="the index folder (Parquet and checkpoint)")
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    parser.add_argument("--jdbc-url", help="jdbc:postgresql://host:port/db?user=..: load the lookup tables there "
                                           "(the password from SWITCHYARD_JDBC_PASSWORD_FILE, never here)")
    parser.add_argument("--full", action="store_true", help="read every trace file again (the result is the same)")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--driver-memory", default="1g")
    args = parser.parse_args(argv)
    spark = spark_session(args.master, "switchyard-trace-index", shuffle_partitions=args.shuffle_partitions,
                          driver_memory=args.driver_memory)
    try:
        run(spark, args.input, args.output, jdbc_url=args.jdbc_url, jdbc_password=password_from_file(), full=args.full)
    except Exception as exc:
        print_progress("failed", 100, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
