"""Pure DataFrame → DataFrame steps of the trace index. No I/O here; each step is idempotent.

raw events (one row per line of a trace file)
  → clean_events          keep well-formed events of known kinds, add `rank` (the order of same-microsecond steps)
  → timelines             one row per message: its message fields and its events, each once, in timeline order
  → summarize_timelines   one row per message: ids, producer, times, transaction state, per-group state and
                          attempts, and the ordered timeline itself
summaries
  → timeline_events       back to one row per event (to merge a message's indexed events with new ones)
  → summary_rows / timeline_rows   the columns of the PostgreSQL lookup tables

A message's timeline is its events ordered by (ts_us, rank, event_id). Everything after the one shuffle
(`timelines` groups by message id) works on each message's small array of events with higher-order
functions: no second shuffle, no sort of the whole batch.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.trace_schema import EVENT_RANK, STATE_PRECEDENCE

MESSAGE_FIELDS = ["topic", "message_type", "key", "business_id", "cluster"]
# the timeline's element: the leading fields are its order (ts_us, rank, event_id)
TIMELINE_FIELDS = ["ts_us", "rank", "event_id", "group", "event", "attempt", "consumer", "client_host", "broker",
                   "app_id", "detail", "size"]
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


def timelines(events: DataFrame) -> DataFrame:
    """One row per message: its message fields and `timeline`, its events each once, in timeline order.

    The only shuffle of the index (by message id; each task first collects the events of the messages
    it read, so mostly one row per message crosses the shuffle, not one per event). An event's copies (a trace file read twice, a batch
    re-sent) are whole copies with the same (group, event_id), so after the sort they are neighbours
    and all but the first are dropped.
    """
    ordered = F.array_sort(F.collect_list(F.struct(*TIMELINE_FIELDS)))
    return (
        events.groupBy("message_id")
        .agg(*[F.max(c).alias(c) for c in MESSAGE_FIELDS], ordered.alias("timeline"))
        .withColumn("timeline", F.filter("timeline", lambda e, i: (i == 0) | ~(
            (e.event_id == F.try_element_at("timeline", i).event_id)
            & e.group.eqNullSafe(F.try_element_at("timeline", i).group))))
    )


def timeline_events(messages: DataFrame) -> DataFrame:
    """The events of each message's timeline, one row per event (EVENT_COLUMNS)."""
    return (messages.select("message_id", *MESSAGE_FIELDS, F.explode("timeline").alias("e"))
            .select("message_id", *MESSAGE_FIELDS, *[F.col(f"e.{c}").alias(c) for c in EVENT_FIELDS])
            .withColumn("date", F.date_format(F.timestamp_micros("ts_us"), "yyyy-MM-dd")))


# An event's place in its timeline as one long: ts_us * 16 + rank. The rank names the kind, so the
# max/min of this key gives both when and what the last/first step of a kind was.
_RANK_BITS = 16


def _key(e: Column) -> Column:
    return e.ts_us * _RANK_BITS + e.rank


def _kind(key: Column) -> Column:
    kinds = F.create_map(*[F.lit(x) for kind, rank in EVENT_RANK.items() for x in (rank, kind)])
    return kinds[(key % _RANK_BITS).cast("int")]


def _time(key: Column) -> Column:
    return F.floor(key / _RANK_BITS).cast("long")


def _ranks(*kinds: str) -> list[int]:
    return [EVENT_RANK[k] for k in kinds]


def _is(e: Column, *kinds: str) -> Column:
    return e["rank"].isin(*_ranks(*kinds))


def _max(events: Column, value, where=None) -> Column:
    """max(value(e)) over the events (where where(e)); null when there is none."""
    return F.array_max(F.transform(F.filter(events, where) if where else events, value))


def _min(events: Column, value, where=None) -> Column:
    return F.array_min(F.transform(F.filter(events, where) if where else events, value))


def _last(events: Column, field: str) -> Column:
    """The field of the last event (in timeline order) that has it."""
    return F.try_element_at(F.filter(events, lambda e: e[field].isNotNull()), F.lit(-1))[field]


def _when(condition: Column, value: Column) -> Column:
    return F.when(condition, value)


def _null(kind: str) -> Column:
    return F.lit(None).cast(kind)


def _group_figures(group: Column, events: Column) -> Column:
    """One pass over a group's events (in timeline order): the figures its summary is made of."""
    def step(acc, e):
        key = _key(e)
        return F.struct(
            # the last terminal step decides; a redrive after it reopens the group
            F.greatest(acc.decisive, _when(_is(e, *TERMINAL, "redriven"), key)).alias("decisive"),
            F.greatest(acc.active, _when(_is(e, "delivered", "nacked", "timed_out"), key)).alias("active"),
            F.greatest(acc.attempts, e.attempt).alias("attempts"),
            (acc.deliveries + _is(e, "delivered").cast("int")).alias("deliveries"),
            (acc.nacks + _is(e, "nacked").cast("int")).alias("nacks"),
            (acc.timeouts + _is(e, "timed_out").cast("int")).alias("timeouts"),
            F.least(acc.first_delivered_us, _when(_is(e, "delivered"), e.ts_us)).alias("first_delivered_us"),
            F.coalesce(e.consumer, acc.last_consumer).alias("last_consumer"),
            F.coalesce(e.detail, acc.detail).alias("detail"),
        )
    zero = F.struct(_null("long").alias("decisive"), _null("long").alias("active"), F.lit(0).alias("attempts"),
                    F.lit(0).alias("deliveries"), F.lit(0).alias("nacks"), F.lit(0).alias("timeouts"),
                    _null("long").alias("first_delivered_us"), _null("string").alias("last_consumer"),
                    _null("string").alias("detail"))
    return F.struct(group.alias("group"), F.aggregate(events, zero, step).alias("f"))


def _group_summary(g: Column, published_us: Column) -> Column:
    """The state of one group (docs/trace-events.md) from its figures."""
    f = g.f
    decisive, active = f.decisive, f.active
    terminal = (decisive % _RANK_BITS).isin(*_ranks(*TERMINAL))
    state = (F.when(terminal, _kind(decisive))
             .when(active.isNotNull() & (decisive.isNull() | (active > decisive)),
                   F.when((active % _RANK_BITS) == EVENT_RANK["delivered"], F.lit("in_flight"))
                   .otherwise(F.lit("retrying")))
             .otherwise(F.lit("pending")))
    ended = F.when(terminal, _time(decisive))
    return F.struct(
        g.group.alias("group"), state.alias("state"), f.attempts.alias("attempts"),
        f.deliveries.alias("deliveries"), f.nacks.alias("nacks"), f.timeouts.alias("timeouts"),
        f.first_delivered_us.alias("first_delivered_us"), ended.alias("ended_us"),
        (ended - published_us).alias("latency_us"), f.last_consumer.alias("last_consumer"),
        f.detail.alias("detail"),
    )


_MESSAGE_STATE = """CASE
    WHEN transaction_state IN ('rolled_back', 'prepared') THEN transaction_state
    WHEN stored_ts_us IS NOT NULL THEN 'stored'
    ELSE 'published' END"""


def _message_figures(timeline: Column) -> Column:
    """One pass over a message's timeline: the figures of its summary that are not per group."""
    def step(acc, e):
        produced, stored = _is(e, "published", "prepared"), _is(e, "stored")
        return F.struct(
            F.least(acc.first_ts_us, e.ts_us).alias("first_ts_us"),
            F.greatest(acc.last_ts_us, e.ts_us).alias("last_ts_us"),
            F.least(acc.produced, _when(produced, _key(e))).alias("produced"),
            F.least(acc.stored_ts_us, _when(stored, e.ts_us)).alias("stored_ts_us"),
            F.greatest(acc.producer_app, _when(produced, e.app_id)).alias("producer_app"),
            F.greatest(acc.any_app, e.app_id).alias("any_app"),
            F.greatest(acc.producer_host, _when(produced, e.client_host)).alias("producer_host"),
            F.greatest(acc.producer_broker, _when(produced, e.broker)).alias("producer_broker"),
            F.greatest(acc.stored_broker, _when(stored, e.broker)).alias("stored_broker"),
            F.greatest(acc["size"], _when(produced, e["size"])).alias("size"),
            F.greatest(acc.tx, _when(_is(e, *TRANSACTION), _key(e))).alias("tx"),
        )
    zero = F.struct(*[_null(kind).alias(name) for name, kind in (
        ("first_ts_us", "long"), ("last_ts_us", "long"), ("produced", "long"), ("stored_ts_us", "long"),
        ("producer_app", "string"), ("any_app", "string"), ("producer_host", "string"),
        ("producer_broker", "string"), ("stored_broker", "string"), ("size", "long"), ("tx", "long"))])
    return F.aggregate(timeline, zero, step)


def summarize_timelines(messages: DataFrame) -> DataFrame:
    """One summary row per message of `timelines` output (states as docs/trace-events.md defines), with
    its timeline. Row-local: no shuffle."""
    tl = F.col("timeline")
    names = F.array_sort(F.array_distinct(F.transform(F.filter(tl, lambda e: e.group.isNotNull()),
                                                      lambda e: e.group)))
    figures = F.transform(names, lambda g: _group_figures(g, F.filter(tl, lambda e: e.group == g)))
    m = F.col("_m")
    overall = F.coalesce(*[F.when(F.array_contains("final_states", s), F.lit(s)) for s in STATE_PRECEDENCE])
    return (
        messages.select("message_id", *MESSAGE_FIELDS, "timeline", _message_figures(tl).alias("_m"),
                        figures.alias("_figures"))
        .select(
            "message_id", *MESSAGE_FIELDS, "timeline", "_figures",
            m.first_ts_us.alias("first_ts_us"), m.last_ts_us.alias("last_ts_us"),
            F.size(tl).cast("int").alias("event_count"),
            _time(m.produced).alias("published_ts_us"), m.stored_ts_us.alias("stored_ts_us"),
            F.coalesce(m.producer_app, m.any_app).alias("app_id"), m.producer_host.alias("producer_host"),
            F.coalesce(m.producer_broker, m.stored_broker).alias("broker"), m["size"].alias("size"),
            _kind(m.tx).alias("transaction_state"),
        )
        .withColumn("groups", F.transform("_figures", lambda g: _group_summary(g, F.col("published_ts_us"))))
        .withColumn("final_states", F.expr(
            f"CASE WHEN size(groups) = 0 THEN array({_MESSAGE_STATE}) "
            "ELSE array_sort(array_distinct(transform(groups, g -> g.state))) END"))
        .withColumn("final_state", overall)
        .withColumn("attempts", F.expr("aggregate(groups, 0, (a, g) -> a + g.deliveries)"))
        .withColumn("date", F.date_format(F.timestamp_micros("first_ts_us"), "yyyy-MM-dd"))
        .select(*MESSAGE_COLUMNS, "timeline")
    )


def summarize(events: DataFrame) -> DataFrame:
    """One summary row per message of cleaned `events` (with its timeline)."""
    return summarize_timelines(timelines(events))


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
