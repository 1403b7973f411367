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

from spark_jobs.trace_arrow import MESSAGE_FIELDS
from spark_jobs.trace_schema import EVENT_RANK

EVENT_FIELDS = ["event_id", "ts_us", "rank", "event", "group", "attempt", "consumer", "client_host", "broker",
                "app_id", "detail", "size"]
EVENT_COLUMNS = ["message_id", *MESSAGE_FIELDS, *EVENT_FIELDS, "date"]


def clean_events(raw: DataFrame) -> DataFrame:
    """Drop lines without the fields every event has or with an unknown kind; add rank and the event's date."""
    ranks = F.create_map(*[F.lit(x) for kind, rank in EVENT_RANK.items() for x in (kind, rank)])
    return (
        raw.where(
            F.col("event_id").isNotNull() & F.col("message_id").isNotNull() & F.col("ts_us").isNotNull()
            & F.col("topic").isNotNull() & F.col("event").isin(*EVENT_RANK)
        )
        .withColumn("rank", ranks[F.col("event")])
        .withColumn("date", F.date_format(F.timestamp_micros("ts_us"), "yyyy-MM-dd"))
        .select(*EVENT_COLUMNS)
    )


def timeline_events(messages: DataFrame) -> DataFrame:
    """The events of each message's timeline, one row per event (EVENT_COLUMNS)."""
    return (messages.select("message_id", *MESSAGE_FIELDS, F.explode("timeline").alias("e"))
            .select("message_id", *MESSAGE_FIELDS, *[F.col(f"e.{c}").alias(c) for c in EVENT_FIELDS])
            .withColumn("date", F.date_format(F.timestamp_micros("ts_us"), "yyyy-MM-dd")))


def by_message(events: DataFrame, partitions: int | None = None) -> DataFrame:
    """The index's one shuffle: every event of a message in the same partition."""
    n = partitions or int(events.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    return events.repartition(n, "message_id")


def summarize(events: DataFrame, partitions: int | None = None) -> DataFrame:
    """One summary row per message of cleaned `events`, with its timeline (trace_arrow.SUMMARY_SCHEMA):
    the events shuffled by message id, then each partition's messages summarized in Arrow."""
    return by_message(events, partitions).mapInArrow(summarize_batches, summary_schema())


def summarize_batches(batches):
    """mapInArrow: a partition's event batches (whole messages) → its summary batches."""
    import pyarrow as pa

    from spark_jobs.trace_arrow import SUMMARY_SCHEMA, summarize_table

    batches = list(batches)
    if batches:
        yield from summarize_table(pa.Table.from_batches(batches)).to_batches(max_chunksize=SUMMARY_BATCH)
    else:
        yield from SUMMARY_SCHEMA.empty_table().to_batches()


SUMMARY_BATCH = 16384


def summary_schema():
    """The Spark schema of `summarize`'s rows."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.trace_arrow import SUMMARY_SCHEMA

    return from_arrow_schema(SUMMARY_SCHEMA)


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
