"""The index's pure transforms on small hand-made events, against hand-written expected rows."""

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_jobs.trace_read import EVENT_SCHEMA
from spark_jobs.trace_transforms import bucket_events, by_message, clean_events, summarize, timeline_events

FIELDS = [f.name for f in EVENT_SCHEMA]


def events(spark, *rows):
    full = [Row(**{f: r.get(f, 1 if f == "v" else None) for f in FIELDS}) for r in rows]
    return spark.createDataFrame(full, EVENT_SCHEMA)


def ev(event_id, message_id, ts_us, event, **extra):
    return {"event_id": event_id, "message_id": message_id, "ts_us": ts_us, "event": event, "topic": "orders",
            "message_type": "normal", "cluster": "c1", "broker": "n1", **extra}


def G(group, state, attempts, deliveries, nacks=0, timeouts=0, first=None, ended=None, latency=None,
      consumer=None, detail=None):
    return Row(group=group, state=state, attempts=attempts, deliveries=deliveries, nacks=nacks, timeouts=timeouts,
               first_delivered_us=first, ended_us=ended, latency_us=latency, last_consumer=consumer, detail=detail)


def test_clean_events_drops_malformed_and_unknown_kinds_and_ranks_the_rest(spark):
    raw = events(spark,
                 ev("e1", "m1", 10, "published"),
                 ev("e2", "m1", 10, "stored"),
                 ev("e3", "m1", 20, "teleported"),           # unknown kind
                 {**ev("e4", "m1", 30, "acked"), "message_id": None},   # no message id
                 {**ev("e5", "m1", None, "acked")})            # no time
    out = clean_events(raw).select("event_id", "event", "rank", "date")
    assertDataFrameEqual(out, [Row(event_id="e1", event="published", rank=0, date="1970-01-01"),
                               Row(event_id="e2", event="stored", rank=2, date="1970-01-01")])


def test_summaries_keep_each_event_once_in_timeline_order(spark):
    new = clean_events(events(spark, ev("e1", "m1", 10, "published"), ev("e1", "m1", 10, "published"),
                              ev("e4", "m1", 20, "delivered", group="g1", attempt=1),
                              ev("e4", "m1", 20, "delivered", group="g2", attempt=1),  # one event id, two groups
                              ev("e2", "m1", 20, "stored"), ev("e3", "m2", 30, "published"),
                              ev("e2", "m1", 20, "stored")))
    out = summarize(new).select("message_id", F.transform("timeline", lambda e: F.concat_ws(
        "/", e.event_id, e.event, F.coalesce(e.group, F.lit("-")))).alias("steps"))
    assertDataFrameEqual(out, [Row(message_id="m1", steps=["e1/published/-", "e2/stored/-", "e4/delivered/g1",
                                                          "e4/delivered/g2"]),
                               Row(message_id="m2", steps=["e3/published/-"])])
    back = timeline_events(summarize(new)).select("message_id", "event_id", "group", "rank", "date")
    assertDataFrameEqual(back, [Row(message_id="m1", event_id="e1", group=None, rank=0, date="1970-01-01"),
                                Row(message_id="m1", event_id="e2", group=None, rank=2, date="1970-01-01"),
                                Row(message_id="m1", event_id="e4", group="g1", rank=5, date="1970-01-01"),
                                Row(message_id="m1", event_id="e4", group="g2", rank=5, date="1970-01-01"),
                                Row(message_id="m2", event_id="e3", group=None, rank=0, date="1970-01-01")])


def test_summarize_one_row_per_message_with_per_group_final_state(spark):
    pub = {"app_id": "shop", "client_host": "10.0.0.5:4100", "size": 42, "key": "k-1", "business_id": "order-1"}
    raw = events(
        spark,
        # m-ack: acked at once by billing
        ev("a1", "m-ack", 1000, "published", **pub), ev("a2", "m-ack", 1200, "stored", key="k-1"),
        ev("a3", "m-ack", 2000, "delivered", group="billing", consumer="c1", attempt=1),
        ev("a4", "m-ack", 2500, "acked", group="billing", consumer="c1", attempt=1),
        # m-retry: nacked twice, then acked on the third attempt
        ev("b1", "m-retry", 1000, "published", app_id="shop"), ev("b2", "m-retry", 1100, "stored"),
        ev("b3", "m-retry", 2000, "delivered", group="billing", consumer="c1", attempt=1),
        ev("b4", "m-retry", 2100, "nacked", group="billing", consumer="c1", attempt=1, detail="db down"),
        ev("b5", "m-retry", 3000, "delivered", group="billing", consumer="c2", attempt=2),
        ev("b6", "m-retry", 3100, "nacked", group="billing", consumer="c2", attempt=2, detail="db down"),
        ev("b7", "m-retry", 4000, "delivered", group="billing", consumer="c1", attempt=3),
        ev("b8", "m-retry", 4200, "acked", group="billing", consumer="c1", attempt=3),
        # m-two: acked by billing, dead-lettered by audit after a timeout, still in flight nowhere
        ev("c1", "m-two", 1000, "published", app_id="shop"), ev("c2", "m-two", 1000, "stored"),
        ev("c3", "m-two", 2000, "delivered", group="billing", consumer="c1", attempt=1),
        ev("c4", "m-two", 2300, "acked", group="billing", consumer="c1", attempt=1),
        ev("c5", "m-two", 2000, "delivered", group="audit", consumer="c9", attempt=1),
        ev("c6", "m-two", 5000, "timed_out", group="audit", consumer="c9", attempt=1),
        ev("c7", "m-two", 6000, "dead_lettered", group="audit", attempt=1, detail="delivery limit 1"),
        # m-redrive: dead-lettered, then re-driven and delivered again: in flight, not final
        ev("d1", "m-redrive", 1000, "published"), ev("d2", "m-redrive", 1000, "stored"),
        ev("d3", "m-redrive", 2000, "expired", group="billing", detail="ttl"),
        ev("d4", "m-redrive", 3000, "redriven", group="billing"),
        ev("d5", "m-redrive", 4000, "delivered", group="billing", consumer="c1", attempt=1),
        # m-tx: prepared then rolled back, never delivered
        ev("t1", "m-tx", 1000, "prepared", app_id="shop", size=7), ev("t2", "m-tx", 1500, "rolled_back", app_id="shop"),
    )
    out = summarize(clean_events(raw)).drop("date", "message_type", "cluster", "topic", "producer_host", "size",
                                            "key", "business_id", "timeline")
    assertDataFrameEqual(out, [
        Row(message_id="m-ack", app_id="shop", broker="n1", first_ts_us=1000, last_ts_us=2500, published_ts_us=1000,
            stored_ts_us=1200, transaction_state=None, final_state="acked", final_states=["acked"], attempts=1,
            event_count=4, groups=[G("billing", "acked", 1, 1, first=2000, ended=2500, latency=1500, consumer="c1")]),
        Row(message_id="m-retry", app_id="shop", broker="n1", first_ts_us=1000, last_ts_us=4200,
            published_ts_us=1000, stored_ts_us=1100, transaction_state=None, final_state="acked",
            final_states=["acked"], attempts=3, event_count=8,
            groups=[G("billing", "acked", 3, 3, nacks=2, first=2000, ended=4200, latency=3200, consumer="c1",
                      detail="db down")]),
        Row(message_id="m-two", app_id="shop", broker="n1", first_ts_us=1000, last_ts_us=6000, published_ts_us=1000,
            stored_ts_us=1000, transaction_state=None, final_state="dead_lettered",
            final_states=["acked", "dead_lettered"], attempts=2, event_count=7,
            groups=[G("audit", "dead_lettered", 1, 1, timeouts=1, first=2000, ended=6000, latency=5000,
                      consumer="c9", detail="delivery limit 1"),
                    G("billing", "acked", 1, 1, first=2000, ended=2300, latency=1300, consumer="c1")]),
        Row(message_id="m-redrive", app_id=None, broker="n1", first_ts_us=1000, last_ts_us=4000,
            published_ts_us=1000, stored_ts_us=1000, transaction_state=None, final_state="in_flight",
            final_states=["in_flight"], attempts=1, event_count=5,
            groups=[G("billing", "in_flight", 1, 1, first=4000, consumer="c1", detail="ttl")]),
        Row(message_id="m-tx", app_id="shop", broker="n1", first_ts_us=1000, last_ts_us=1500, published_ts_us=1000,
            stored_ts_us=None, transaction_state="rolled_back", final_state="rolled_back",
            final_states=["rolled_back"], attempts=0, event_count=2, groups=[]),
    ])


def test_summarize_takes_message_fields_and_producer_from_the_published_event(spark):
    raw = events(spark,
                 ev("x2", "m1", 500, "delivered", group="g", attempt=1, consumer="c"),
                 ev("x1", "m1", 100, "published", app_id="shop", client_host="h:1", size=9, key="k",
                    business_id="b-1"))
    row = summarize(clean_events(raw)).select("key", "business_id", "producer_host", "size", "date", "topic").first()
    assert row.asDict() == {"key": "k", "business_id": "b-1", "producer_host": "h:1", "size": 9,
                            "date": "1970-01-01", "topic": "orders"}


def test_summaries_keep_real_clock_times_exact(spark):
    """Microsecond times of today are beyond what a float holds exactly: states, times and latencies built
    from them stay exact."""
    t = 1_767_225_600_123_457  # 2026-01-01T00:00:00.123457Z
    raw = events(spark,
                 ev("p1", "m-c", t, "prepared", app_id="shop", size=3),
                 ev("p2", "m-c", t + 1, "committed"), ev("p3", "m-c", t + 1, "stored"),
                 ev("p4", "m-c", t + 3, "delivered", group="g", attempt=1, consumer="c"),
                 ev("p5", "m-c", t + 5, "acked", group="g", attempt=1, consumer="c"),
                 ev("q1", "m-r", t, "prepared"), ev("q2", "m-r", t + 7, "rolled_back"))
    rows = {r.message_id: r for r in summarize(clean_events(raw)).collect()}
    c, r = rows["m-c"], rows["m-r"]
    assert (c.transaction_state, c.final_state, c.published_ts_us, c.stored_ts_us, c.last_ts_us, c.date) == (
        "committed", "acked", t, t + 1, t + 5, "2026-01-01")
    assert c.groups == [G("g", "acked", 1, 1, first=t + 3, ended=t + 5, latency=5, consumer="c")]
    assert [e.event for e in c.timeline] == ["prepared", "stored", "committed", "delivered", "acked"]
    assert (r.transaction_state, r.final_state, r.published_ts_us, r.last_ts_us) == (
        "rolled_back", "rolled_back", t, t + 7)


def test_the_shuffle_brings_every_event_of_a_message_to_one_partition(spark):
    """Events of 40 messages in 4 input partitions, shuffled into 3: each message's 3 events end in one."""
    rows = [ev(f"e-{m}-{k}", f"m-{m:02d}", 1000 * m + k, "published" if k == 0 else "stored")
            for k in range(3) for m in range(40)]
    cleaned = clean_events(events(spark, *rows).repartition(4))
    moved = by_message(cleaned, 3).mapInArrow(_messages_of_partition, "partition long, message_id string, events long")
    placed = {}
    for r in moved.collect():
        placed.setdefault(r.message_id, []).append((r.partition, r.events))
    assert sorted(placed) == [f"m-{m:02d}" for m in range(40)]
    assert all(len(where) == 1 and where[0][1] == 3 for where in placed.values())


def _messages_of_partition(batches):
    table = bucket_events(batches)
    if table is not None:
        counts = table.group_by("message_id").aggregate([("message_id", "count")])
        yield pa.RecordBatch.from_pydict({"partition": [TaskContext.get().partitionId()] * counts.num_rows,
                                          "message_id": counts["message_id"].to_pylist(),
                                          "events": counts["message_id_count"].to_pylist()})
