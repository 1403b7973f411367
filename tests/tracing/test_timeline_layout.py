"""The timeline picture's layout: time axis, one lane per group, each attempt, where it ended (hand-computed)."""

from types import SimpleNamespace

from apps.tracing.timeline import Attempt, Mark, Tick, layout


def e(ts_us, event, group=None, attempt=None, consumer=None, detail=None):
    return SimpleNamespace(ts_us=ts_us, event=event, group_name=group, attempt=attempt, consumer=consumer,
                           detail=detail)


def test_lanes_attempts_and_axis():
    events = [
        e(0, "published"), e(0, "stored"),
        e(1000, "delivered", "billing", 1, "c1"), e(1000, "delivered", "audit", 1, "c9"),
        e(2000, "nacked", "billing", 1, "c1", "db down"),
        e(3000, "delivered", "billing", 2, "c1"), e(4000, "acked", "billing", 2, "c1"),
    ]
    pic = layout(events, {"billing": "acked", "audit": "in_flight"}, "stored", width=900)
    # plot from x=150 to x=790; 4,000 µs span → 0.16 px per µs
    assert (pic.width, pic.height, pic.plot_left, pic.plot_right, pic.axis_y) == (900, 172, 150.0, 790.0, 138)
    assert pic.ticks == [Tick(150.0, "0"), Tick(310.0, "+1 ms"), Tick(470.0, "+2 ms"), Tick(630.0, "+3 ms"),
                         Tick(790.0, "+4 ms")]
    producer, audit, billing = pic.lanes
    assert [(lane.name, lane.y, lane.end_state) for lane in pic.lanes] == [
        ("producer", 12, "stored"), ("audit", 52, "in_flight"), ("billing", 92, "acked")]
    assert producer.marks == [Mark(150.0, "published", "published at 0"), Mark(150.0, "stored", "stored at 0")]
    assert billing.attempts == [
        Attempt(1, 310.0, 470.0, "nacked", "delivered attempt 1 by c1 at +1 ms → nacked attempt 1 by c1 at +2 ms (db down)"),
        Attempt(2, 630.0, 790.0, "acked", "delivered attempt 2 by c1 at +3 ms → acked attempt 2 by c1 at +4 ms"),
    ]
    assert billing.marks == [Mark(790.0, "acked", "acked attempt 2 by c1 at +4 ms")]
    # still in flight: the bar runs to the end of the axis
    assert audit.attempts == [Attempt(1, 310.0, 790.0, "in_flight", "delivered attempt 1 by c9 at +1 ms")]


def test_dead_letter_and_redrive_are_marks_and_a_single_instant_has_one_tick():
    events = [e(5, "published"), e(5, "dead_lettered", "g", None, None, "limit"), e(5, "redriven", "g")]
    pic = layout(events, {"g": "pending"}, "published")
    assert pic.ticks == [Tick(150.0, "0")]
    assert [(m.x, m.event) for m in pic.lanes[1].marks] == [(150.0, "dead_lettered"), (150.0, "redriven")]
    assert pic.lanes[1].attempts == []


def test_broadcast_consumers_attempts_run_side_by_side():
    events = [
        e(0, "published"), e(0, "stored"),
        e(1000, "delivered", "fan", 1, "c1"), e(1000, "delivered", "fan", 1, "c2"),
        e(1500, "nacked", "fan", 1, "c2"), e(2000, "delivered", "fan", 2, "c2"),  # c1 still holds its attempt 1
        e(3000, "acked", "fan", 1, "c1"), e(4000, "acked", "fan", 2, "c2"),
    ]
    fan = layout(events, {"fan": "acked"}, "stored").lanes[1]
    assert fan.attempts == [
        Attempt(1, 310.0, 630.0, "acked", "delivered attempt 1 by c1 at +1 ms → acked attempt 1 by c1 at +3 ms"),
        Attempt(1, 310.0, 390.0, "nacked", "delivered attempt 1 by c2 at +1 ms → nacked attempt 1 by c2 at +1.5 ms"),
        Attempt(2, 470.0, 790.0, "acked", "delivered attempt 2 by c2 at +2 ms → acked attempt 2 by c2 at +4 ms"),
    ]
    assert fan.marks == [Mark(630.0, "acked", "acked attempt 1 by c1 at +3 ms"),
                         Mark(790.0, "acked", "acked attempt 2 by c2 at +4 ms")]


def test_a_clustering_redelivery_to_another_consumer_ends_the_silent_attempt_as_unknown():
    events = [e(0, "published"), e(1000, "delivered", "billing", 1, "c1"),  # c1 went away without an answer
              e(3000, "delivered", "billing", 2, "c2"), e(4000, "acked", "billing", 2, "c2")]
    billing = layout(events, {"billing": "acked"}, "published").lanes[1]
    assert billing.attempts == [
        Attempt(1, 310.0, 310.0, "unknown", "delivered attempt 1 by c1 at +1 ms"),
        Attempt(2, 630.0, 790.0, "acked", "delivered attempt 2 by c2 at +3 ms → acked attempt 2 by c2 at +4 ms"),
    ]
