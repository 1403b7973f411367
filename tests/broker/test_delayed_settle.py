"""Issue 20: what a replicated topic's schedule tells its followers. `settled_through` (the leader's "delivered
through" mark) never passes a message that is not durably delivered — one being appended, one whose append
failed and waits to be retried — and a follower's passive copy publishes nothing, drops what is settled, and
delivers the rest once promoted. `DelayedMessages` on its own, over the memory-level schedule store; the topic's
publish is the test's function that records each append and answers it when the test says."""

from __future__ import annotations

import time

from broker_core import protocol as p
from broker_core.delivery.delayed import DelayedMessages
from broker_core.storage.schedule_memory import MemorySchedule
from broker_core.tracing.sink import NullTraceSink


class Appends:
    """The topic's publish as the schedule sees it: each append recorded, answered later by the test."""

    def __init__(self):
        self.calls: list[tuple[list, object]] = []  # (message arrays, reply)

    def __call__(self, app_id, arrays, size, reply) -> None:
        self.calls.append((arrays, reply))

    def ids(self) -> list[str]:
        return [a[p.M_ID] for arrays, _ in self.calls for a in arrays]


class Timers:
    def __init__(self):
        self.pending: list[tuple[object, tuple]] = []

    def __call__(self, delay, fn, *args):
        self.pending.append((fn, args))
        return self

    def cancel(self) -> None:
        return None

    def run_retries(self, schedule: DelayedMessages) -> None:
        for fn, args in [t for t in self.pending if t[1]]:  # (the retry timer has arguments; the due timer none)
            fn(*args)
        self.pending = [t for t in self.pending if not t[1]]


def schedule_of(passive: bool = False) -> tuple[DelayedMessages, Appends, Timers]:
    appends, timers = Appends(), Timers()
    store = MemorySchedule(notify=lambda fn, *args: fn(*args))
    return DelayedMessages("orders", store, appends, NullTraceSink(), timers, passive=passive), appends, timers


def message(i: int, due_ms: int) -> list:
    return [*p.message(f"m{i}", "default", b"x")[:9], 0, due_ms]


def test_the_mark_stays_below_a_message_until_its_append_is_durable_also_across_a_failed_append():
    schedule, appends, timers = schedule_of()
    now_ms = int(time.time() * 1000)
    due = now_ms - 5  # due already: the next tick appends it
    schedule.schedule("app", None, [message(1, due), message(2, now_ms + 60_000)], lambda *answer: None)
    schedule.tick(time.monotonic())
    assert appends.ids() == ["m1"]
    assert schedule.settled_through(now_ms) < due, "being appended: not settled"
    appends.calls[0][1](RuntimeError("disk full"), 0, 0)  # the append failed: retried a second later
    assert schedule.settled_through(now_ms) < due, "waiting to be retried: still not settled"
    timers.run_retries(schedule)
    schedule.tick(time.monotonic())
    assert appends.ids() == ["m1", "m1"] and schedule.settled_through(now_ms) < due
    appends.calls[1][1](None, 7, 1)  # durable now
    settled = schedule.settled_through(int(time.time() * 1000))
    assert due <= settled < now_ms + 60_000, "settled through m1, not through m2 (scheduled, not due)"
    assert schedule.count == 1


def test_a_passive_copy_publishes_nothing_drops_what_is_settled_and_delivers_the_rest_once_promoted():
    copy, appends, _ = schedule_of(passive=True)
    now_ms = int(time.time() * 1000)
    answers = []
    copy.replicate("app", now_ms - 1000, [message(i, now_ms - 100 + i) for i in range(4)], answers.append)
    assert answers == [None] and copy.count == 4
    copy.tick(time.monotonic())
    assert appends.calls == [] and copy.count == 4, "due, but a follower's copy publishes nothing"
    copy.settle_through(now_ms - 100 + 1)  # the leader delivered m0 and m1
    copy.tick(time.monotonic())
    assert appends.calls == [] and copy.count == 2
    copy.activate()  # promoted
    copy.tick(time.monotonic())
    copy.tick(time.monotonic())
    assert sorted(appends.ids()) == ["m2", "m3"]
