"""Resetting a group's position (docs/broker-admin-api.md `POST /admin/group/reset`): skip the backlog.

Every message the group still owes that the broker received before the reset time is finished for the group,
as an ack would finish it: waiting ones leave their lanes, in-flight ones leave their subscriptions (a late ack
of one is ignored, as for a timed-out delivery). The store records the finishes (the ack file's KIND_FINISH
records at the file level), so after a restart the skipped messages stay skipped; messages received at or
after the reset time are delivered as before. What the group owes on disk (its backlog past the window in memory)
is read back in batches and finished likewise, up to the first message received at or after the reset time. Kept apart from `group.py`: it reads the group's lanes and
subscriptions, and the delivery path never calls it.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core.delivery.group import Group
from broker_core.delivery.lanes import Lane
from broker_core.delivery.ordered import OrderedGroup
from broker_core.storage.partitions import PARTITION_BITS
from broker_core.storage.store import StoredMessage


def skip_backlog(group: Group, before_ms: int, detail: str, on_done: Callable[[int], None]) -> None:
    """Finish for the group every message it owes that was received before `before_ms`; `on_done(how many)` once
    done (the part of its backlog on disk is read back in batches, off the event loop). `detail` goes with each
    message's trace event (why it was not delivered)."""
    backlog = group.backlog
    if backlog is None:
        skipped = _skip_in_memory(group, before_ms, detail)
        group.dispatch()
        on_done(skipped)
        return

    def start() -> None:
        count = [_skip_in_memory(group, before_ms, detail)]

        def batch(messages: list[StoredMessage]) -> None:
            count[0] += len(messages)
            _finish(group, messages, detail)

        def done() -> None:
            group.dispatch()
            on_done(count[0])

        backlog.skip(lambda m: m.received_ms >= before_ms, batch, done)

    backlog.when_idle(start)  # after the read in flight, if any: what it brings in is skipped in memory


def _finish(group: Group, messages: list[StoredMessage], detail: str) -> None:
    for m in messages:
        group.trace.emit("expired", message_id=m.id, topic=group.topic, message_type=m.message_type, key=m.key,
                         business_id=m.business_id, group=group.name, detail=detail)
    group.store.finish_many(messages, group.name)
    for m in messages:
        m.pending -= 1


def _skip_in_memory(group: Group, before_ms: int, detail: str) -> int:
    ordered = isinstance(group, OrderedGroup)
    if ordered:
        group.requeue_waiting()  # an ordered group's messages wait per key: back in the lane for this pass
    taken: list[tuple[Lane, StoredMessage]] = []
    for lane in [group.main, *group.lanes.values()]:
        waiting = lane.waiting
        for m in [*lane.ready, *(m for _, _, m in lane.deferred)]:
            if m.seq in waiting and m.received_ms < before_ms:
                waiting.discard(m.seq)  # stale entries left in `ready` and `deferred` are passed over there
                lane.attempts.pop(m.seq, None)
                taken.append((lane, m))
    for sub in group.subs:
        late = [seq for seq, (m, _, _) in sub.in_flight.items() if m.received_ms < before_ms]
        for seq in late:
            taken.append((sub.lane, sub.in_flight.pop(seq)[0]))
    shared: list[StoredMessage] = []
    for lane, m in taken:
        if group.mode == "broadcast" and lane is not group.main:
            group.trace.emit("expired", message_id=m.id, topic=group.topic, message_type=m.message_type, key=m.key,
                             business_id=m.business_id, group=group.name, detail=detail)
            group._copy_done(m)  # the message is finished once every consumer's copy is
        else:
            shared.append(m)
    if shared:
        _finish(group, shared, detail)
    if ordered:
        group.unstick()  # a key whose message out was skipped goes on
    return len(taken)  # the caller dispatches (not before the skip on disk has begun: no read may start between)


def leave_partition(group: Group, partition: int) -> int:
    """The partition is led by another broker now (a failover, or a rebalance took it off this one): what the group
    holds of it waiting leaves its lanes, unfinished (the new leader owes it: its copy and its acks are replicated),
    and its backlog on disk is no longer read here. What is in flight stays until it is answered or times out. So
    two brokers never deliver one partition at once (an ordered topic's key stays with one consumer). Returns how
    many messages left."""
    low, high = partition << PARTITION_BITS, (partition + 1) << PARTITION_BITS
    left = 0
    for lane in [group.main, *group.lanes.values()]:
        gone = {seq for seq in lane.waiting if low <= seq < high}
        lane.waiting -= gone
        for seq in gone:
            lane.attempts.pop(seq, None)
            group.copies.pop(seq, None)
        left += len(gone)
    parts = getattr(group.backlog, "parts", None)
    if parts is not None:
        part = parts.pop(partition, None)
        if part is not None:
            part.closed = True
    return left
