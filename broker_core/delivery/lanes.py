"""What a consumer group is made of (broker_core.delivery.group): subscriptions, and the lanes messages wait in.

A *lane* holds the messages waiting for a set of subscriptions: ready in order, or deferred until a due
time (a retry after its backoff). Clustering mode has one lane that all subscriptions share; broadcast mode
gives each subscription its own. A *subscription* is one connection's subscription to one group; it holds
the messages in flight on it.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from broker_core.storage.store import StoredMessage


class Consumer:
    """What a group needs from a consumer connection (the server's ClientConnection provides it)."""

    consumer_id: str
    peer: str
    paused: bool

    def deliver(self, sub_id: int, items: list) -> None: ...

    def room(self) -> int:
        """Bytes of deliveries it may still be handed now (<= 0: none until it has written some out)."""
        ...

    def unsubscribed(self, sub_id: int, reason: str) -> None: ...

    def error(self, ref: int | None, code: str, message: str) -> None:
        """A refusal that does not close the connection (an ordered group's `stale_generation`)."""
        ...


class SubscribedGroup(Protocol):
    """The group a subscription belongs to, as the subscription's connection drives it (`group.Group` is one):
    lanes never import the group made of them."""

    topic: str
    name: str

    def dispatch(self) -> None: ...

    def set_credit(self, sub: Subscription, credit: int) -> None: ...

    def ack(self, sub: Subscription, seqs: list[int]) -> None: ...

    def nack(self, sub: Subscription, items: list) -> None: ...

    def unsubscribe(self, sub: Subscription, reason: str | None = None) -> None: ...


class Subscription:
    """One connection's subscription to one group. `in_flight` keeps delivery order, so its first
    entries have the earliest deadlines (every entry of a subscription has the same ack timeout)."""

    __slots__ = ("sub_id", "conn", "group", "credit", "wanted", "ack_timeout", "in_flight", "lane", "active")

    def __init__(self, sub_id: int, conn: Consumer, group: SubscribedGroup, credit: int, ack_timeout: float,
                 wanted: int | None = None):
        self.sub_id = sub_id
        self.conn = conn
        self.group = group
        self.credit = credit  # what the group lets it hold: `wanted`, capped by the binding's max_in_flight
        self.wanted = credit if wanted is None else wanted  # what the consumer asked for
        self.ack_timeout = ack_timeout
        # seq -> (message, attempt, deadline)
        self.in_flight: dict[int, tuple[StoredMessage, int, float]] = {}
        self.lane: Lane | None = None
        self.active = True

    def available(self) -> int:
        return self.credit - len(self.in_flight)


class Lane:
    """Messages waiting for a set of subscriptions: ready in order, deferred until a due time."""

    __slots__ = ("ready", "deferred", "waiting", "attempts", "subs", "rr")

    def __init__(self) -> None:
        self.ready: deque[StoredMessage] = deque()
        self.deferred: list[tuple[float, int, StoredMessage]] = []  # heap of (due, seq, message)
        self.waiting: set[int] = set()  # seqs in ready or deferred (an expired one leaves it early)
        self.attempts: dict[int, int] = {}  # deliveries so far of messages that came back (nack, timeout, lost)
        self.subs: list[Subscription] = []
        self.rr = 0

    def add(self, m: StoredMessage) -> None:
        self.ready.append(m)
        self.waiting.add(m.seq)

    def depth(self) -> int:
        return len(self.waiting)

    def drain(self) -> list[StoredMessage]:
        """Take every waiting message out (ready ones first, then deferred ones by due time)."""
        out = [m for m in self.ready if m.seq in self.waiting]
        out += [m for _, _, m in sorted(self.deferred) if m.seq in self.waiting]
        self.ready.clear()
        self.deferred.clear()
        self.waiting.clear()
        return out


def give_to_lanes(lanes: dict[Subscription, Lane], main: Lane, copies: dict[int, list], messages: list[StoredMessage],
                  attempts: dict[int, int]) -> None:
    """Broadcast: hand waiting messages to every consumer now connected (or keep them in `main`), with the
    deliveries they had so far (`attempts`); `copies` counts each message's lanes."""
    targets = list(lanes.values()) or [main]
    for lane in targets:
        lane.attempts.update((m.seq, attempts[m.seq]) for m in messages if m.seq in attempts)
    if not lanes:
        for m in messages:
            main.add(m)
        return
    for m in messages:
        copies[m.seq] = [len(targets), False]
        for lane in targets:
            lane.add(m)


def give_to_one_lane(lanes: dict[Subscription, Lane], main: Lane, copies: dict[int, list],
                     messages: list[StoredMessage], attempts: dict[int, int]) -> None:
    """Broadcast: messages that a consumer held alone (it was cut off or left before it acked them) go back
    to the group ONCE: to the connected consumer with the least waiting, or kept for the next one. Handing
    them to every consumer would multiply what the broker holds and sends (none of them was owed these)."""
    lane = min(lanes.values(), key=lambda lane: len(lane.waiting)) if lanes else main
    lane.attempts.update((m.seq, attempts[m.seq]) for m in messages if m.seq in attempts)
    for m in messages:
        if lanes:
            copies[m.seq] = [1, False]
        lane.add(m)


def oldest_owed_ms(lanes: list[Lane], subs: list[Subscription], on_disk_ms: int | None = None) -> int | None:
    """When the broker received the oldest message these lanes and subscriptions still owe, or the oldest of the
    group's backlog on disk (`on_disk_ms`) if older (None: nothing)."""
    times = [on_disk_ms] + [next((m.received_ms for m in lane.ready if m.seq in lane.waiting), None)
                            for lane in lanes]
    times += [m.received_ms for lane in lanes for _, _, m in lane.deferred if m.seq in lane.waiting]
    times += [m.received_ms for sub in subs for m, _, _ in sub.in_flight.values()]
    return min((t for t in times if t is not None), default=None)
