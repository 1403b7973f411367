"""Pure DataFrame → DataFrame steps of the trace index. No I/O here; each step is idempotent.

raw events (one row per line of a trace file)
  → clean_events   keep well-formed events of known kinds, add `rank` (the order of same-microsecond steps)
  → dedupe_events  each (message_id, event_id) once, minus the events already indexed
  → summarize      one row per message: ids, producer, times, transaction state, per-group state and attempts
summaries / events
  → summary_rows / timeline_rows   the columns of the PostgreSQL lookup tables

A message's timeline is its events ordered by (ts_us, rank, event_id).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.trace_schema import EVENT_RANK, STATE_PRECEDENCE

MESSAGE_FIELDS = ["topic", "message_type", "key", "business_id", "cluster"]
EVENT_FIELDS = ["event_id", "ts_us", "rank", "event", "group", "attempt", "consumer", "client_host", "broker",
                "app_id", "detail", "size"]
EVENT_COLUMNS = ["message_id", *MESSAGE_FIELDS, *EVENT_FIELDS, "date"]
TERMINAL = ("acked", "dead_lettered", "expired")
TRANSACTION = ("prepared", "committed", "rolled_back")


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


def dedupe_events(events: DataFrame, indexed: DataFrame | None = None) -> DataFrame:
    """Each event once: copies within `events` collapse, and events already in `indexed` are dropped."""
    unique = events.dropDuplicates(["message_id", "event_id"])
    if indexed is None:
        return unique
    return unique.join(indexed.select("message_id", "event_id"), ["message_id", "event_id"], "left_anti")


def _latest(condition: Column, *fields: str) -> Column:
    """The struct of the last event (in timeline order) meeting condition; null when none does."""
    return F.max(F.when(condition, F.struct("ts_us", "rank", "event_id", *fields)))


def _earliest(condition: Column, *fields: str) -> Column:
    return F.min(F.when(condition, F.struct("ts_us", "rank", "event_id", *fields)))


_GROUP_STATE = f"""CASE
    WHEN _decisive.event IN {TERMINAL} THEN _decisive.event
    WHEN _active IS NOT NULL AND (_decisive IS NULL OR _active > _decisive)
        THEN CASE WHEN _active.event = 'delivered' THEN 'in_flight' ELSE 'retrying' END
    ELSE 'pending' END"""
_MESSAGE_STATE = """CASE
    WHEN transaction_state IN ('rolled_back', 'prepared') THEN transaction_state
    WHEN stored_ts_us IS NOT NULL THEN 'stored'
    ELSE 'published' END"""


def summarize(events: DataFrame) -> DataFrame:
    """One summary row per message of `events` (all of its events), states as docs/trace-events.md defines."""
    event = F.col("event")
    per_group = events.groupBy("message_id", "group").agg(
        *[F.max(c).alias(c) for c in MESSAGE_FIELDS],
        F.min("ts_us").alias("first_ts_us"),
        F.max("ts_us").alias("last_ts_us"),
        F.count("*").alias("event_count"),
        _earliest(event.isin("published", "prepared"), "client_host", "app_id", "broker", "size").alias("_produced"),
        _earliest(event == "stored", "broker").alias("_stored"),
        _earliest(F.col("app_id").isNotNull(), "app_id").alias("_app"),
        _latest(event.isin(*TRANSACTION), "event").alias("_tx"),
        # the last terminal step decides; a redrive after it reopens the group
        _latest(event.isin(*TERMINAL, "redriven"), "event").alias("_decisive"),
        _latest(event.isin("delivered", "nacked", "timed_out"), "event").alias("_active"),
        F.coalesce(F.max("attempt"), F.lit(0)).alias("attempts"),
        F.count_if(event == "delivered").cast("int").alias("deliveries"),
        F.count_if(event == "nacked").cast("int").alias("nacks"),
        F.count_if(event == "timed_out").cast("int").alias("timeouts"),
        F.min(F.when(event == "delivered", F.col("ts_us"))).alias("first_delivered_us"),
        _latest(F.col("consumer").isNotNull(), "consumer").alias("_consumer"),
        _latest(F.col("detail").isNotNull(), "detail").alias("_detail"),
    )
    group_row = F.when(F.col("group").isNotNull(), F.struct(
        F.col("group"),
        F.expr(_GROUP_STATE).alias("state"),
        "attempts", "deliveries", "nacks", "timeouts", "first_delivered_us",
        F.when(F.col("_decisive.event").isin(*TERMINAL), F.col("_decisive.ts_us")).alias("ended_us"),
        F.col("_consumer.consumer").alias("last_consumer"),
        F.col("_detail.detail").alias("detail"),
    ))
    messages = per_group.groupBy("message_id").agg(
        *[F.max(c).alias(c) for c in MESSAGE_FIELDS],
        F.min("first_ts_us").alias("first_ts_us"),
        F.max("last_ts_us").alias("last_ts_us"),
        F.sum("event_count").alias("event_count"),
        F.min("_produced").alias("_produced"),
        F.min("_stored").alias("_stored"),
        F.min("_app").alias("_app"),
        F.max("_tx").alias("_tx"),
        F.array_sort(F.collect_list(group_row)).alias("_groups"),
    )
    overall = F.coalesce(*[F.when(F.array_contains("final_states", s), F.lit(s)) for s in STATE_PRECEDENCE])
    return (
        messages.withColumn("published_ts_us", F.col("_produced.ts_us"))
        .withColumn("stored_ts_us", F.col("_stored.ts_us"))
        .withColumn("app_id", F.coalesce(F.col("_produced.app_id"), F.col("_app.app_id")))
        .withColumn("producer_host", F.col("_produced.client_host"))
        .withColumn("broker", F.coalesce(F.col("_produced.broker"), F.col("_stored.broker")))
        .withColumn("size", F.col("_produced.size"))
        .withColumn("transaction_state", F.col("_tx.event"))
        .withColumn("groups", F.expr(
            "transform(_groups, g -> named_struct('group', g.group, 'state', g.state, 'attempts', g.attempts, "
            "'deliveries', g.deliveries, 'nacks', g.nacks, 'timeouts', g.timeouts, "
            "'first_delivered_us', g.first_delivered_us, 'ended_us', g.ended_us, "
            "'latency_us', g.ended_us - published_ts_us, 'last_consumer', g.last_consumer, 'detail', g.detail))"))
        .withColumn("final_states", F.expr(
            f"CASE WHEN size(groups) = 0 THEN array({_MESSAGE_STATE}) "
            "ELSE array_sort(array_distinct(transform(groups, g -> g.state))) END"))
        .withColumn("final_state", overall)
        .withColumn("attempts", F.expr("aggregate(groups, 0, (a, g) -> a + g.deliveries)"))
        .withColumn("event_count", F.col("event_count").cast("int"))
        .withColumn("date", F.date_format(F.timestamp_micros("first_ts_us"), "yyyy-MM-dd"))
        .select(*MESSAGE_COLUMNS)
    )


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


def timeline_rows(events: DataFrame) -> DataFrame:
    """Columns of the PostgreSQL timeline table's staging copy: one row per event."""
    return events.select("message_id", *EVENT_FIELDS)
