"""DataFrame → DataFrame steps of the trace index. No I/O here; each step is idempotent.

raw events (one row per line of a trace file)
  → clean_events          keep well-formed events of known kinds, add `rank` (the order of same-microsecond steps)
  → summarize             the one shuffle (by message id), then per partition `trace_arrow.summarize_table`:
                          one row per message with its ids, producer, times, transaction state, per-group
                          state and attempts, and its timeline (its events, each once, in timeline order)
summaries
  → timeline_events       back to one row per event (to merge a message's indexed events with new ones)
  → summary_rows / timeline_rows   the columns of the PostgreSQL lookup tables

A message's timeline is its events ordered by (ts_us, rank, event_id, group). After the shuffle a message's
events are in one partition, and Arrow's kernels summarize a whole partition column-wise (one sort and a few
hash aggregations) instead of Spark evaluating lambdas over each message's array of events.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.trace_arrow import EVENT_FIELDS, MESSAGE_FIELDS

EVENT_COLUMNS = ["message_id", *MESSAGE_FIELDS, *EVENT_FIELDS, "date"]


def clean_events(raw: DataFrame) -> DataFrame:
    """Drop lines without the fields every event has or with an unknown kind; add rank and the event's date
    (trace_arrow.clean_table, the rule the job applies to the files it reads)."""
    from spark_jobs.trace_arrow import RAW_SCHEMA

    return (raw.select(*RAW_SCHEMA.names).mapInArrow(_clean_batches, _spark_schema("CLEAN_SCHEMA"))
            .withColumn("date", F.date_format(F.timestamp_micros("ts_us"), "yyyy-MM-dd")))


def _clean_batches(batches):
    import pyarrow as pa

    from spark_jobs.trace_arrow import clean_table

    for batch in batches:
        yield from clean_table(pa.Table.from_batches([batch])).to_batches()


def timeline_events(messages: DataFrame) -> DataFrame:
    """The events of each message's timeline, one row per event (EVENT_COLUMNS)."""
    return (messages.select("message_id", *MESSAGE_FIELDS, F.explode("timeline").alias("e"))
            .select("message_id", *MESSAGE_FIELDS, *[F.col(f"e.{c}").alias(c) for c in EVENT_FIELDS])
            .withColumn("date", F.date_format(F.timestamp_micros("ts_us"), "yyyy-MM-dd")))


# The shuffle by message id carries Arrow tables, not rows: each task cuts its events into buckets by
# message id (trace_arrow.split_by_bucket) and ships one row per bucket (the bucket's events as an Arrow
# IPC stream); after the shuffle a partition holds one bucket, so every event of its messages.
BLOB_DDL = "part int, data binary"


def by_message(events: DataFrame, partitions: int | None = None) -> DataFrame:
    """Cleaned events (EVENT_COLUMNS; `date` is not kept) shuffled by message id as bucket blobs."""
    count = partitions or int(events.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    return shuffle(to_buckets(events, count), count)


def to_buckets(events: DataFrame, count: int) -> DataFrame:
    """Cleaned events as bucket blobs (BLOB_DDL), not yet shuffled."""
    from spark_jobs.trace_arrow import CLEAN_COLUMNS

    return events.select(*CLEAN_COLUMNS).mapInArrow(bucket_splitter(count), BLOB_DDL)


def shuffle(blobs: DataFrame, count: int) -> DataFrame:
    """Bucket blobs moved so that partition b holds bucket b (and nothing else)."""
    return blobs.repartition(count, "part")


def bucket_splitter(count: int):
    """mapInArrow: clean event batches → one blob row per bucket they have events of."""
    labels = bucket_labels(count)

    def split(batches):
        import pyarrow as pa

        batches = list(batches)
        if batches:
            yield from bucket_blobs(pa.Table.from_batches(batches), count, labels)

    return split


def bucket_blobs(events, count: int, labels: list[int]):
    """Record batches of BLOB_DDL: one row per bucket of `events` (a clean Arrow table)."""
    import pyarrow as pa

    from spark_jobs.trace_arrow import split_by_bucket, to_ipc

    for bucket, part in split_by_bucket(events, count):
        yield pa.RecordBatch.from_arrays([pa.array([labels[bucket]], pa.int32()), pa.array([to_ipc(part)], pa.binary())],
                                         names=["part", "data"])


def bucket_labels(count: int) -> list[int]:
    """For each bucket b, a `part` value that Spark's hash partitioning (Murmur3, seed 42, pmod count) sends to
    partition b, so the `count` buckets fill the `count` partitions one each."""
    labels: dict[int, int] = {}
    value = 0
    while len(labels) < count:
        labels.setdefault(_murmur3_int(value) % count, value)
        value += 1
    return [labels[b] for b in range(count)]


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's Murmur3_x86_32.hashInt (what F.hash gives for an int column)."""
    mask = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & mask

    k1 = rotl((value & mask) * 0xCC9E2D51 & mask, 15) * 0x1B873593 & mask
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def bucket_events(batches):
    """The events of a partition's bucket blobs, as one Arrow table (None if there are none)."""
    import pyarrow as pa

    from spark_jobs.trace_arrow import from_ipc

    tables = [from_ipc(blob.as_buffer()) for batch in batches for blob in batch.column(1)]
    return pa.concat_tables(tables) if tables else None


def summarize(events: DataFrame, partitions: int | None = None) -> DataFrame:
    """One summary row per message of cleaned `events`, with its timeline (trace_arrow.SUMMARY_SCHEMA):
    the events shuffled by message id, then each partition's messages summarized in Arrow."""
    return by_message(events, partitions).mapInArrow(summarize_blobs, summary_schema())


def summarize_blobs(batches):
    """mapInArrow: a partition's bucket blobs → its summary batches."""
    from spark_jobs.trace_arrow import SUMMARY_SCHEMA, summarize_table

    events = bucket_events(batches)
    summaries = summarize_table(events) if events is not None else SUMMARY_SCHEMA.empty_table()
    yield from summaries.to_batches(max_chunksize=SUMMARY_BATCH)


SUMMARY_BATCH = 16384


def summary_schema():
    """The Spark schema of `summarize`'s rows."""
    return _spark_schema("SUMMARY_SCHEMA")


def _spark_schema(name: str):
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs import trace_arrow

    return from_arrow_schema(getattr(trace_arrow, name))


MESSAGE_COLUMNS = [
    "message_id", "topic", "message_type", "key", "business_id", "cluster", "app_id", "producer_host", "broker",
    "size", "first_ts_us", "last_ts_us", "published_ts_us", "stored_ts_us", "transaction_state", "final_state",
    "final_states", "attempts", "event_count", "groups", "date",
]


def summary_rows(messages: DataFrame) -> DataFrame:
    """Columns of the PostgreSQL summary table's staging copy (JSON and lists as text)."""
    return messages.select(
        *[c for c in MESSAGE_COLUMNS if c not in ("final_states", "groups", "date")],
        F.concat_ws(",", "final_states").alias("final_states"),
        F.to_json("groups", {"ignoreNullFields": "false"}).alias("groups"),
    )


def timeline_rows(messages: DataFrame) -> DataFrame:
    """Columns of the PostgreSQL timeline table's staging copy: one row per event of each message's timeline."""
    return messages.select("message_id", F.explode("timeline").alias("e")).select(
        "message_id", *[F.col(f"e.{c}").alias(c) for c in EVENT_FIELDS])
