"""The timeline picture of one message, laid out as plain data; the template draws it as inline SVG.

A time axis from the message's first to its last event; one lane for the producer side (published,
stored, prepared, committed, rolled back) and one lane per consumer group, where each delivery
attempt is a bar from `delivered` to its outcome (nacked, timed out, acked, dead-lettered) and the
lane ends with the group's final state. Outcomes end the attempt of their consumer, so a broadcast
group's consumers have their attempts side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LABEL_WIDTH = 150
END_WIDTH = 110
LANE_HEIGHT = 40
TOP = 12
AXIS_HEIGHT = 34
PRODUCER_LANE = "producer"
PRODUCER_EVENTS = ("published", "prepared", "stored", "committed", "rolled_back")
OUTCOMES = ("acked", "nacked", "timed_out", "dead_lettered", "expired")
_NOBODY = object()  # an outcome that ends no attempt in flight


@dataclass
class Mark:
    x: float
    event: str
    title: str


@dataclass
class Attempt:
    attempt: int | None
    x1: float
    x2: float
    outcome: str  # acked | nacked | timed_out | dead_lettered | expired | in_flight
    title: str

    @property
    def width(self) -> float:
        return max(self.x2 - self.x1, 2.0)


@dataclass
class Lane:
    name: str
    y: float
    end_state: str
    marks: list[Mark] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def mid(self) -> float:
        return self.y + LANE_HEIGHT / 2


@dataclass
class Tick:
    x: float
    label: str


@dataclass
class Timeline:
    width: int
    height: int
    plot_left: float
    plot_right: float
    axis_y: float
    lanes: list[Lane]
    ticks: list[Tick]


def _offset_label(delta_us: int, span_us: int) -> str:
    if delta_us == 0:
        return "0"
    if span_us < 10_000_000:
        return f"+{delta_us / 1000:g} ms"
    return f"+{delta_us / 1_000_000:g} s"


def layout(events, group_states: dict[str, str], message_state: str, width: int = 900) -> Timeline:
    """events: the message's timeline in order (objects with ts_us, event, group_name, attempt, consumer, detail)."""
    events = list(events)
    t0 = events[0].ts_us if events else 0
    t1 = events[-1].ts_us if events else 0
    span = max(t1 - t0, 1)
    left, right = float(LABEL_WIDTH), float(width - END_WIDTH)

    def x(ts_us: int) -> float:
        return round(left + (ts_us - t0) / span * (right - left), 1)

    groups = sorted({e.group_name for e in events if e.group_name} | set(group_states))
    lanes = [Lane(PRODUCER_LANE, TOP, message_state)]
    lanes += [Lane(g, TOP + (i + 1) * LANE_HEIGHT, group_states.get(g, "pending")) for i, g in enumerate(groups)]
    by_name = {lane.name: lane for lane in lanes}
    # per group, the attempts in flight by consumer: a broadcast group has one per consumer at a time
    in_flight: dict[str, dict[str | None, Attempt]] = {}
    broadcast: set[str] = set()
    for e in events:
        title = _title(e, t0, span)
        if not e.group_name:
            by_name[PRODUCER_LANE].marks.append(Mark(x(e.ts_us), e.event, title))
            continue
        lane = by_name[e.group_name]
        held = in_flight.setdefault(e.group_name, {})
        if e.event == "delivered":
            _start(held, e, broadcast)
            attempt = Attempt(e.attempt, x(e.ts_us), x(e.ts_us), "in_flight", title)
            lane.attempts.append(attempt)
            held[e.consumer] = attempt
        elif e.event in OUTCOMES:
            attempt = held.pop(_holder(held, e), None)
            if attempt is not None:
                attempt.x2, attempt.outcome = x(e.ts_us), e.event
                attempt.title += f" → {title}"
            if attempt is None or e.event in ("dead_lettered", "expired", "acked"):
                lane.marks.append(Mark(x(e.ts_us), e.event, title))
        else:
            lane.marks.append(Mark(x(e.ts_us), e.event, title))
    for held in in_flight.values():  # still in flight: draw it to the end of the axis
        for attempt in held.values():
            attempt.x2 = right
    axis_y = TOP + len(lanes) * LANE_HEIGHT + 6
    ticks = [Tick(round(left + i * (right - left) / 4, 1), _offset_label(round(i * span / 4), span))
             for i in range(5)] if t1 > t0 else [Tick(left, "0")]
    return Timeline(width, int(axis_y + AXIS_HEIGHT), left, right, axis_y, lanes, ticks)


def _start(held: dict, e, broadcast: set[str]) -> None:
    """A new delivery ends, as "unknown", the attempts it shows went nowhere: an earlier one to the same
    consumer, and in clustering mode (one consumer at a time, attempts counted on across consumers) one to
    another consumer. Two consumers holding the same attempt number at once is broadcast mode."""
    for consumer, other in list(held.items()):
        if consumer != e.consumer and other.attempt == e.attempt:
            broadcast.add(e.group_name)
        elif consumer == e.consumer or e.group_name not in broadcast:
            held.pop(consumer).outcome = "unknown"


def _holder(held: dict, e):
    """Whose attempt an outcome ends: its consumer's; without one (dead-lettered, expired) the one attempt
    in flight with its attempt number."""
    if e.consumer in held:
        return e.consumer
    matching = [c for c, a in held.items() if e.attempt is None or a.attempt == e.attempt]
    return matching[0] if len(matching) == 1 else _NOBODY


def _title(e, t0: int, span: int) -> str:
    parts = [e.event.replace("_", " ")]
    if e.attempt:
        parts.append(f"attempt {e.attempt}")
    if e.consumer:
        parts.append(f"by {e.consumer}")
    parts.append(f"at {_offset_label(e.ts_us - t0, max(span, 1))}")
    if e.detail:
        parts.append(f"({e.detail})")
    return " ".join(parts)
