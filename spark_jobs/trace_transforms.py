"""DataFrame → DataFrame steps of the trace index. No I/O here; each step is idempotent.

raw events (one row per event of a trace file)
  → clean_events          keep well-formed events of known kinds, add `rank` (the order of same-microsecond steps)
  → summarize             the one shuffle (by message id), then per partition `trace_arrow.summarize_table`:
                          one row per message with its ids, producer, times, transaction state, per-group
                          state and attempts, and its timeline (its events, each once, in timeline order)
summaries
  → timeline_events       back to one row per event (to merge a message's indexed events with new ones)

The shuffle carries Arrow tables, not rows: each task cuts its events into buckets by message id
(trace_arrow.split_by_bucket) and ships one row per bucket (`part`, the bucket's events as an LZ4 Arrow
IPC stream); Spark's hash partitioning on `part` then brings every bucket, so every event of its messages,
to one partition, whose task summarizes them column-wise. There are BUCKETS_PER_PARTITION times more
buckets than partitions, so that partitions get about as many buckets each.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from spark_jobs.trace_arrow import (
    CLEAN_COLUMNS,
    CLEAN_SCHEMA,
    EVENT_FIELDS,
    MESSAGE_FIELDS,
    RAW_SCHEMA,
    SUMMARY_SCHEMA,
    clean_table,
    from_ipc,
    split_by_bucket,
    summarize_table,
    to_ipc,
)

EVENT_COLUMNS = ["message_id", *MESSAGE_FIELDS, *EVENT_FIELDS, "date"]
BLOB_DDL = "part int, data binary"
BUCKETS_PER_PARTITION = 4
SUMMARY_BATCH = 16384


def clean_events(raw: DataFrame) -> DataFrame:
    """Drop events without the fields every event has or of an unknown kind; add rank and the event's date
    (trace_arrow.clean_table, the rule the job applies to the files it reads)."""
    return (raw.select(*RAW_SCHEMA.names).mapInArrow(_clean_batches, from_arrow_schema(CLEAN_SCHEMA))
            .withColumn("date", F.date_format(F.timestamp_micros("ts_us"), "yyyy-MM-dd")))


def _clean_batches(batches):
    for batch in batches:
        yield from clean_table(pa.Table.from_batches([batch])).to_batches()


def timeline_events(messages: DataFrame) -> DataFrame:
    """The events of each message's timeline, one row per event (EVENT_COLUMNS)."""
    return (messages.select("message_id", *MESSAGE_FIELDS, F.explode("timeline").alias("e"))
            .select("message_id", *MESSAGE_FIELDS, *[F.col(f"e.{c}").alias(c) for c in EVENT_FIELDS])
            .withColumn("date", F.date_format(F.timestamp_micros("ts_us"), "yyyy-MM-dd")))


def bucket_count(partitions: int) -> int:
    return partitions * BUCKETS_PER_PARTITION


def to_buckets(events: DataFrame, buckets: int) -> DataFrame:
    """Cleaned events (EVENT_COLUMNS; `date` is not kept) as bucket blobs (BLOB_DDL), not yet shuffled."""

    def split(batches):
        batches = list(batches)
        if batches:
            yield from bucket_blobs(pa.Table.from_batches(batches), buckets)

    return events.select(*CLEAN_COLUMNS).mapInArrow(split, BLOB_DDL)


def bucket_blobs(events: pa.Table, buckets: int):
    """Record batches of BLOB_DDL: one row per bucket of `events` (a clean Arrow table)."""
    for bucket, part in split_by_bucket(events, buckets):
        yield pa.RecordBatch.from_arrays([pa.array([bucket], pa.int32()), pa.array([to_ipc(part)], pa.binary())],
                                         names=["part", "data"])


def shuffle(blobs: DataFrame, partitions: int) -> DataFrame:
    """Bucket blobs moved so that each bucket is in one partition (Spark's hash partitioning of `part`)."""
    return blobs.repartition(partitions, "part")


def by_message(events: DataFrame, partitions: int | None = None) -> DataFrame:
    """Cleaned events shuffled by message id, as bucket blobs."""
    count = partitions or int(events.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    return shuffle(to_buckets(events, bucket_count(count)), count)


def bucket_events(batches) -> pa.Table | None:
    """The events of a partition's bucket blobs, as one Arrow table (None if there are none)."""
    tables = [from_ipc(blob.as_buffer()) for batch in batches for blob in batch.column(1)]
    return pa.concat_tables(tables) if tables else None


def summarize(events: DataFrame, partitions: int | None = None) -> DataFrame:
    """One summary row per message of cleaned `events`, with its timeline (trace_arrow.SUMMARY_SCHEMA):
    the events shuffled by message id, then each partition's messages summarized in Arrow."""
    return by_message(events, partitions).mapInArrow(summarize_blobs, summary_schema())


def summarize_blobs(batches):
    """mapInArrow: a partition's bucket blobs → its summary batches."""
    events = bucket_events(batches)
    summaries = summarize_table(events) if events is not None else SUMMARY_SCHEMA.empty_table()
    yield from summaries.to_batches(max_chunksize=SUMMARY_BATCH)


def summary_schema():
    """The Spark schema of `summarize`'s rows."""
    return from_arrow_schema(SUMMARY_SCHEMA)
