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


def dedupe_events(events: DataFrame, indexed: DataFrame | None = None, partitions: int = 8) -> DataFrame:
    """Each event once: copies within `events` collapse, and events already in `indexed` are dropped.

    The one shuffle is by message id, so everything after it that groups by message (the summaries)
    needs no other. Copies of an event are whole copies (same group), so the key (message_id, group,
    event_id) is (message_id, event_id) ordered so that the sort it needs is the one the summaries'
    sort-based aggregations need too.
    """
    unique = events.repartition(partitions, "message_id").dropDuplicates(["message_id", "group", "event_id"])
    if indexed is None:
        return unique
    return unique.join(indexed.select("message_id", "event_id"), ["message_id", "event_id"], "left_anti")


# An event's place in its timeline as one long: ts_us * 16 + rank. The rank names the kind, so the
# max/min of this key gives both when and what the last/first step of a kind was, with plain long
# aggregates (hash aggregation) instead of comparing structs.
_RANK_BITS = 16


def _order_key() -> Column:
    return F.col("ts_us") * _RANK_BITS + F.col("rank")


def _kind(key: Column) -> Column:
    kinds = F.create_map(*[F.lit(x) for kind, rank in EVENT_RANK.items() for x in (rank, kind)])
    return kinds[(key % _RANK_BITS).cast("int")]


def _time(key: Column) -> Column:
    return F.floor(key / _RANK_BITS).cast("long")


def _ranks(*kinds: str) -> list[int]:
    return [EVENT_RANK[k] for k in kinds]


_MESSAGE_STATE = """CASE
    WHEN transaction_state IN ('rolled_back', 'prepared') THEN transaction_state
    WHEN stored_ts_us IS NOT NULL THEN 'stored'
    ELSE 'published' END"""


def summarize(events: DataFrame, partitions: int | None = None) -> DataFrame:
    """One summary row per message of `events` (all of its events), states as docs/trace-events.md defines.

    One shuffle (by message id, unless `partitions` is 0: `events` are partitioned by it already) and
    one sort by (message id, group): both aggregations below run on it.
    """
    event, key = F.col("event"), _order_key()
    produced = event.isin("published", "prepared")
    if partitions != 0:
        events = events.repartition(*([partitions] if partitions else []), "message_id")
    per_group = events.sortWithinPartitions("message_id", "group").groupBy("message_id", "group").agg(
        *[F.max(c).alias(c) for c in MESSAGE_FIELDS],
        F.min("ts_us").alias("first_ts_us"),
        F.max("ts_us").alias("last_ts_us"),
        F.count("*").alias("event_count"),
        F.min(F.when(produced, key)).alias("_produced"),
        F.max(F.when(produced, F.col("app_id"))).alias("_producer_app"),
        F.max(F.when(produced, F.col("client_host"))).alias("producer_host"),
        F.max(F.when(produced, F.col("broker"))).alias("_producer_broker"),
        F.max(F.when(produced, F.col("size"))).alias("size"),
        F.min(F.when(event == "stored", F.col("ts_us"))).alias("stored_ts_us"),
        F.max(F.when(event == "stored", F.col("broker"))).alias("_stored_broker"),
        F.max("app_id").alias("_any_app"),
        F.max(F.when(event.isin(*TRANSACTION), key)).alias("_tx"),
        # the last terminal step decides; a redrive after it reopens the group
        F.max(F.when(event.isin(*TERMINAL, "redriven"), key)).alias("_decisive"),
        F.max(F.when(event.isin("delivered", "nacked", "timed_out"), key)).alias("_active"),
        F.coalesce(F.max("attempt"), F.lit(0)).alias("attempts"),
        F.count_if(event == "delivered").cast("int").alias("deliveries"),
        F.count_if(event == "nacked").cast("int").alias("nacks"),
        F.count_if(event == "timed_out").cast("int").alias("timeouts"),
        F.min(F.when(event == "delivered", F.col("ts_us"))).alias("first_delivered_us"),
        F.max_by("consumer", F.when(F.col("consumer").isNotNull(), key)).alias("last_consumer"),
        F.max_by("detail", F.when(F.col("detail").isNotNull(), key)).alias("detail"),
    )
    decisive, active = F.col("_decisive"), F.col("_active")
    terminal = (decisive % _RANK_BITS).isin(*_ranks(*TERMINAL))
    state = (F.when(terminal, _kind(decisive))
             .when(active.isNotNull() & (decisive.isNull() | (active > decisive)),
                   F.when(_kind(active) == "delivered", F.lit("in_flight")).otherwise(F.lit("retrying")))
             .otherwise(F.lit("pending")))
    group_row = F.when(F.col("group").isNotNull(), F.struct(
        F.col("group"), state.alias("state"), "attempts", "deliveries", "nacks", "timeouts", "first_delivered_us",
        F.when(terminal, _time(decisive)).alias("ended_us"), "last_consumer", "detail"))
    messages = per_group.groupBy("message_id").agg(
        *[F.max(c).alias(c) for c in MESSAGE_FIELDS],
        F.min("first_ts_us").alias("first_ts_us"),
        F.max("last_ts_us").alias("last_ts_us"),
        F.sum("event_count").alias("event_count"),
        F.min("_produced").alias("_produced"),
        *[F.max(c).alias(c) for c in ("_producer_app", "producer_host", "_producer_broker", "size",
                                      "_stored_broker", "_any_app", "_tx")],
        F.min("stored_ts_us").alias("stored_ts_us"),
        F.array_sort(F.collect_list(group_row)).alias("_groups"),
    )
    overall = F.coalesce(*[F.when(F.array_contains("final_states", s), F.lit(s)) for s in STATE_PRECEDENCE])
    return (
        messages.withColumn("published_ts_us", _time(F.col("_produced")))
        .withColumn("app_id", F.coalesce("_producer_app", "_any_app"))
        .withColumn("broker", F.coalesce("_producer_broker", "_stored_broker"))
        .withColumn("transaction_state", _kind(F.col("_tx")))
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
