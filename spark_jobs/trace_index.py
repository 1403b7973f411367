"""The trace index job: read new trace files → build and merge message timelines → write Parquet → load PostgreSQL.

    python -m spark_jobs.trace_index --input DIR [DIR ...] --output DIR [--master URL] [--jdbc-url URL]

Incremental: only closed trace files not in the checkpoint are read. Idempotent: events are deduplicated
on event_id (within the batch and against the index), and the summary of a message already indexed is
recomputed from all its events into its one row, so running again over the same files changes nothing. Progress goes to stdout as one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable

from pyspark.sql import functions as F

from spark_jobs.index_store import IndexStore
from spark_jobs.session import POSTGRES_JDBC_JAR, spark_session
from spark_jobs.trace_read import READERS, read_events
from spark_jobs.trace_transforms import EVENT_COLUMNS, clean_events, dedupe_events, summarize

Progress = Callable[..., None]


def print_progress(stage: str, percent: int, **fields) -> None:
    print(json.dumps({"stage": stage, "percent": percent, **fields}), flush=True)


def run(spark, inputs: list[str], output: str, *, jdbc_url: str | None = None, full: bool = False,
        reader: str = "arrow", progress: Progress = print_progress) -> dict:
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
            return {"new_files": 0, "messages": 0, "events": 0, "replaced_files": 0}
        run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        staging = store.staging(run_id)

        # read
        events = clean_events(read_events(spark, files, reader))
        replaced: list[str] = []
        indexed_events = None
        if store.has_index():
            events = events.persist()
            batch_ids = events.select("message_id", "topic").distinct().persist()
            topics = [r.topic for r in batch_ids.select("topic").distinct().collect()]
            hits = (spark.read.parquet(str(store.messages))
                    .select("message_id", "date", "topic", F.col("_metadata.file_path").alias("file"))
                    .where(F.col("topic").isin(topics))
                    .join(batch_ids.select("message_id"), "message_id", "left_semi").persist())
            replaced = [r.file for r in hits.select("file").distinct().collect()]
            progress("found indexed messages with new events", 15, summary_files_to_rewrite=len(replaced))
            if replaced:
                since = hits.agg(F.min("date")).first()[0]  # no event of a message is older than its first
                indexed_events = (spark.read.parquet(str(store.events))
                                  .where(F.col("topic").isin(topics) & (F.col("date") >= since))
                                  .join(hits.select("message_id"), "message_id", "left_semi"))

        # transform + write: the new events first, then the summaries of every message they touch
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        new_events = dedupe_events(events, indexed_events, partitions=partitions).select(*EVENT_COLUMNS)
        new_events.write.partitionBy("date", "topic").parquet(str(staging / "events"))
        # re-read rather than persisted (measured: keeping 5M events cost more than reading them back);
        # with the schema given: a batch of nothing but known events writes no file
        staged_events = spark.read.schema(new_events.schema).parquet(str(staging / "events")).select(*EVENT_COLUMNS)
        progress("wrote the new events", 45)
        timelines = staged_events if indexed_events is None else staged_events.unionByName(indexed_events)
        summaries = summarize(timelines, partitions=partitions)
        if replaced:
            untouched = (spark.read.option("basePath", str(store.messages)).parquet(*replaced)
                         .join(batch_ids.select("message_id"), "message_id", "left_anti"))
            summaries = summaries.unionByName(untouched.select(*summaries.columns))
        summaries.write.partitionBy("date", "topic").parquet(str(staging / "messages"))
        staged_messages = spark.read.schema(summaries.schema).parquet(str(staging / "messages"))
        counts = {"new_events": staged_events.count(),
                  "messages": staged_messages.join(events.select("message_id").distinct(), "message_id",
                                                   "left_semi").count() if replaced else staged_messages.count()}
        progress("wrote the message summaries", 60, **counts)

        # load
        if jdbc_url:
            updated = staged_messages if not replaced else staged_messages.join(
                batch_ids.select("message_id"), "message_id", "left_semi")
            loaded = load_lookup_tables(updated, staged_events, jdbc_url,
                                        progress=lambda stage: progress(stage, 75))
            progress("merged the lookup tables in PostgreSQL", 90, **loaded)
        store.commit(run_id, replaced, files)
        result = {"new_files": len(files), "replaced_files": len(replaced), "run_id": run_id, **counts}
        progress("committed", 100, **result)
        return result


def load_lookup_tables(*args, **kwargs):
    from spark_jobs.pg_load import load_lookup_tables as load

    return load(*args, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.trace_index", description=__doc__.split("\n")[0])
    parser.add_argument("--input", nargs="+", required=True, help="trace folders (each broker's <data dir>/trace)")
    parser.add_argument("--output", required=True, help="the index folder (Parquet and checkpoint)")
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    parser.add_argument("--jdbc-url", help="jdbc:postgresql://host:port/db?user=..: load the lookup tables there")
    parser.add_argument("--full", action="store_true", help="read every trace file again (the result is the same)")
    parser.add_argument("--reader", choices=READERS, default="arrow", help="JSON parser (default arrow)")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--driver-memory", default="1g")
    args = parser.parse_args(argv)
    spark = spark_session(args.master, "switchyard-trace-index", shuffle_partitions=args.shuffle_partitions,
                          driver_memory=args.driver_memory, jars=[POSTGRES_JDBC_JAR] if args.jdbc_url else None)
    try:
        run(spark, args.input, args.output, jdbc_url=args.jdbc_url, full=args.full, reader=args.reader)
    except Exception as exc:
        print_progress("failed", 100, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
