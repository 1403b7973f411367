"""A topic on one broker: stores what producers publish and fans it out to the bound groups.

A message is owed to every group whose binding's selector matches its message type at publish
time; that list is stored with it, so a restart redelivers to the same groups. Groups get a
message only once it is durable (store first, then deliver).

Transaction messages: `prepare` stores them owed to no group; `end_tx` commits one (it is routed
then, to the groups bound at commit time, and delivered once the commit record is durable) or
rolls it back (never delivered). `redrive` puts dead letters back, for their group only.

Delayed messages (issue 21): `publish_delayed` hands the messages of a publish that are due later to the
topic's `DelayedMessages` (`broker_core.delivery.delayed`), which appends them to this topic through `publish`
when they are due, as ordinary messages (owed to the groups bound then). On a topic whose partition 0 has two or
more replicas, those replicas keep the schedule (the leader's active, the followers' copies passive: issue 20)
and due messages are appended to partition 0, replicated as any publish.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker_core.cluster.state import Binding, ClusterState
from broker_core.delivery.backlog import WINDOW_BYTES, WINDOW_MESSAGES
from broker_core.delivery.delayed import DelayedMessages, ScheduleNotLed
from broker_core.delivery.group import Group
from broker_core.delivery.ordered import OrderedGroup
from broker_core.delivery.publish_rules import PublishPlan
from broker_core.protocol import M_BODY, M_DELIVER_AT_MS, M_ID, M_TYPE
from broker_core.storage.partitions import partition_of
from broker_core.storage.schedule import ScheduleStore
from broker_core.storage.store import DeadLetter, StoredMessage, TopicStore, TxEntry
from broker_core.tracing.sink import TraceSink

log = logging.getLogger("broker_core.topic")

# reply(error or None, first seq, count)
PublishReply = Callable[[BaseException | None, int, int], None]


class Topic:
    def __init__(self, name: str, store: TopicStore, state: ClusterState, *, trace: TraceSink, max_credit: int,
                 window: tuple[int, int] = (WINDOW_MESSAGES, WINDOW_BYTES), schedule: ScheduleStore | None = None,
                 call_later: Callable[..., object] | None = None):
        self.name = name
        self.store = store
        self.state = state
        self.trace = trace  # the node's sink (a NullTraceSink when tracing is off: its methods do nothing)
        self.max_credit = max_credit
        self.window = window  # a group's window of messages in memory (messages, bytes): delivery/backlog.py
        self.groups: dict[str, Group] = {}
        self.group_made: Callable[[Group], None] | None = None  # told of each group made (node/drain.py)
        self.stored_end: dict[int, int] = {}  # partition -> the seq after the last message stored and given to groups
        # partition -> its replication leader on this broker (broker_core.replication.leader): admit, wrap, published
        self.leaders: dict[int, object] = {}
        self.dropped: set[str] = set()  # groups whose binding was removed: what still arrives for them is finished
        self._routes: dict[str, tuple[str, ...]] = {}
        self.published = 0
        self.published_bytes = 0
        self.publish_failures = 0
        self.tx_prepared = self.tx_committed = self.tx_rolled_back = self.redriven = 0
        self.delayed: DelayedMessages | None = None  # the schedule of delayed messages (None: refuses them)
        if schedule is not None and call_later is not None:
            schedule.recover()
            self.delayed = DelayedMessages(name, schedule, self._publish_due, trace, call_later,
                                           passive=self.schedule_replicated())

    def recover(self) -> int:
        """Give each group what the store still owes it: its position in the log (file level: the messages stay
        on disk until the group reads them) or the messages (memory level: none after a start). Returns how many
        (message, group) deliveries are owed."""
        return self.take_owed(self.store.recover())

    def take_owed(self, owed) -> int:
        """`recover` for a store's recovery result (a partition placed on this broker later, too)."""
        parts = getattr(owed, "parts", None)
        if parts is not None:  # a placed topic's partitions, each with its groups' positions in its own log
            return sum(self.take_owed(part) for part in parts)
        starts = getattr(owed, "starts", None)
        in_memory = owed.in_memory if starts is not None else owed
        count = 0
        for g, start in (starts or {}).items():
            if start.start is not None:
                self.group(g).resume(start, owed.end)
                count += start.owed
        for m, groups in in_memory:
            for g in groups:
                self.group(g).enqueue_committed(m)
            count += len(groups)
        if count:
            log.info("topic %s: recovered %d deliveries owed to %d groups", self.name, count, len(self.groups))
        return count

    def group(self, name: str) -> Group:
        group = self.groups.get(name)
        if group is None:
            config = self.state.topics.get(self.name)
            kind = OrderedGroup if config is not None and config.ordered else Group
            group = kind(self.name, name, self.store, self.state.binding(self.name, name), trace=self.trace,
                         max_credit=self.max_credit, window=self.window)
            self.groups[name] = group
            if self.group_made is not None:
                self.group_made(group)
        return group

    def binding_changed(self, group: str, binding: Binding | None) -> None:
        self._routes.clear()
        if binding is not None:
            self.dropped.discard(group)
            self.group(group).set_binding(binding)
        elif group in self.groups:
            self.groups[group].set_binding(None)

    def drop_group(self, name: str) -> int:
        """The group's binding was removed: its consumers' subscriptions end, and what it still owed (its backlog,
        in flight or waiting) and its dead letters are deleted. Returns the messages dropped."""
        self._routes.clear()
        self.dropped.add(name)
        group = self.groups.pop(name, None)
        owed = group.release("binding removed") if group is not None else []
        if owed:
            self._finish(owed, name)
        backlog = group.backlog if group is not None else None
        on_disk = backlog.depth() if backlog is not None else 0
        if on_disk:  # what it owed on disk is read and finished, batch by batch, off the event loop
            backlog.when_idle(lambda: backlog.skip(lambda m: False, lambda batch: self._finish(batch, name),
                                                   lambda: None))
        self.store.drop_dead_letters(name)
        if owed or group is not None:
            log.info("topic %s: group %s dropped with %d messages it still owed", self.name, name, len(owed) + on_disk)
        return len(owed) + on_disk

    def known_groups(self) -> set[str]:
        """Groups this topic holds anything for: messages or dead letters."""
        index = self.store.dead_index
        return set(self.groups) | set(index.live) | set(index.redriven)

    def replace_store(self, store: TopicStore) -> None:
        """Another storage level (the caller checked that the topic holds no message now)."""
        self.store = store
        for group in self.groups.values():
            group.use_store(store)

    def replace_schedule(self, schedule: ScheduleStore) -> None:
        """Another storage level for the schedule too (the caller checked that nothing is scheduled), or an empty
        copy for a follower whose leader sends its schedule anew (the same role: active or passive)."""
        old = self.delayed
        if old is not None:
            old.close()
            schedule.recover()
            self.delayed = DelayedMessages(self.name, schedule, self._publish_due, self.trace, old.call_later,
                                           passive=old.passive)
            self.delayed.replicas = old.replicas

    def schedule_replicated(self) -> bool:
        """Whether the replicas of partition 0 keep this topic's schedule (it has two or more)."""
        return len((self.state.placements.get(self.name) or {}).get(0, ())) > 1

    def close(self, reason: str) -> None:
        """The topic goes from this broker: every subscription ends with `reason` (the caller discards the store)."""
        for group in self.groups.values():
            group.release(reason)
        self.groups.clear()
        if self.delayed is not None:
            self.delayed.close()

    def routes(self, message_type: str) -> tuple[str, ...]:
        """The groups a message of this type is owed to (cached until a binding changes)."""
        groups = self._routes.get(message_type)
        if groups is None:
            groups = tuple(sorted(g for g, b in self.state.topic_bindings(self.name).items()
                                  if b.matches(message_type)))
            for g in groups:
                self.group(g)
            if len(self._routes) > 10_000:
                self._routes.clear()
            self._routes[message_type] = groups
        return groups

    def publish(self, app_id: str, client_host: str | None, arrays: list[list], size: int,
                reply: PublishReply, partition: int | None = None) -> None:
        """Store a batch of message arrays (`size`: their body bytes) in `partition` (None: the topic's home
        partition on this broker); `reply` runs once it is durable (or failed)."""
        received_ms = int(time.time() * 1000)
        leader = self.leaders.get(partition) if self.leaders and partition is not None else None
        if leader is not None:  # a replicated partition: refused while too few replicas are in sync
            refused = leader.admit()
            if refused is not None:
                reply(refused, 0, 0)
                return
            reply = leader.wrap(reply)  # answered once min_insync replicas hold it
        routes = self.routes
        groups = []
        last_type = last_groups = None
        for fields in arrays:
            message_type = fields[M_TYPE]
            if message_type != last_type:  # batches are mostly of one type
                last_type, last_groups = message_type, routes(message_type)
            groups.append(last_groups)
        stored: list[list[StoredMessage]] = []
        traced: list = []  # the sink's handle for the batch: `stored` names its `published` record

        def done(exc: BaseException | None) -> None:
            self._stored(stored[0] if stored else [], size, exc, reply, client_host, traced[0] if traced else None)

        store = self.store
        if partition is None:
            stored.append(store.append(app_id, received_ms, arrays, groups, done))
        else:
            stored.append(store.append_to(partition, app_id, received_ms, arrays, groups, done))
        if leader is not None:
            leader.published(stored[0], app_id, received_ms, arrays, groups)
        traced.append(self.trace.emit_messages("published", self.name, stored[0], app_id=app_id,
                                               client_host=client_host, ts_us=received_ms * 1000, arrays=arrays))

    def publish_delayed(self, app_id: str, client_host: str | None, arrays: list[list], plan: PublishPlan,
                        reply: PublishReply) -> None:
        """A publish some of whose messages are due after `plan.now_ms`: those go to the schedule, the others are
        published at once (to `plan.partition`); `reply` once both parts are durable (count: all of them; first
        seq: of the others)."""
        now_ms, partition = plan.now_ms, plan.partition
        at = M_DELIVER_AT_MS
        later = [f for f in arrays if len(f) > at and f[at] > now_ms]
        if self.delayed is None:
            reply(RuntimeError("this topic keeps no schedule on this broker"), 0, 0)
            return
        if self.delayed.passive:  # a replicated topic whose partition 0 is not led here (the SDK sends there)
            reply(ScheduleNotLed(f"topic {self.name!r} keeps its delayed messages with the leader of its partition "
                                 "0, not this broker now: read /partition-state and send there"), 0, 0)
            return
        if len(later) == len(arrays):
            self.delayed.schedule(app_id, client_host, arrays, reply)
            return
        now = [f for f in arrays if not (len(f) > at and f[at] > now_ms)]
        now_size = sum(len(f[M_BODY]) for f in now)
        parts: list = []

        def part(exc: BaseException | None, first_seq: int, count: int) -> None:
            parts.append((exc, first_seq))
            if len(parts) == 2:
                failed = next((e for e, _ in parts if e is not None), None)
                reply(failed, max(s for _, s in parts), 0 if failed else len(arrays))

        self.delayed.schedule(app_id, client_host, later, part)
        self.publish(app_id, client_host, now, now_size, part, partition)

    def _publish_due(self, app_id: str | None, arrays: list[list], size: int, reply: PublishReply) -> None:
        self.publish(app_id, None, arrays, size, reply, 0 if self.schedule_replicated() else None)

    def _stored(self, messages: list[StoredMessage], size: int, exc: BaseException | None, reply: PublishReply,
                client_host: str | None, traced: object = None) -> None:
        if exc is not None or not messages:
            self.publish_failures += len(messages)
            reply(exc, 0, 0)
            return
        self.published += len(messages)
        self.published_bytes += size
        end = messages[-1].seq + 1
        if end > self.stored_end.get(part := partition_of(end - 1), 0):
            self.stored_end[part] = end
        reply(None, messages[0].seq, len(messages))
        self.trace.emit_messages("stored", self.name, messages, app_id=messages[0].app_id, client_host=client_host,
                                 same_as=traced)
        if part in getattr(self.store, "following", ()):
            return  # its partition was led elsewhere while it was stored (not acknowledged): its new leader delivers
        # runs of messages owed to the same groups (routes() hands out one tuple per type)
        run: list[StoredMessage] = []
        run_groups = messages[0].groups
        for m in messages:
            if m.groups is not run_groups:
                self._enqueue(run_groups, run)
                run, run_groups = [], m.groups
            run.append(m)
        self._enqueue(run_groups, run)

    def _enqueue(self, groups: tuple[str, ...], messages: list[StoredMessage]) -> None:
        for g in groups:
            if g in self.dropped:  # stored while its binding was being removed: nobody is owed it any more
                self._finish(messages, g)
            else:
                self.group(g).enqueue(messages)

    def _finish(self, messages: list[StoredMessage], group: str) -> None:
        self.store.finish_many(messages, group)
        for m in messages:
            m.pending -= 1

    # -- transaction messages -------------------------------------------------------------------

    def prepare(self, app_id: str, client_host: str | None, conn_no: int, arrays: list[list], size: int,
                reply: PublishReply, partition: int | None = None) -> None:
        """Store prepared messages in `partition` (None: the home partition); `reply` once durable (on a
        replicated partition: once `min_insync` replicas hold them). A message id this topic already holds as a
        transaction message is not stored again (a producer's resend after a lost answer)."""
        store = self.store
        known = store.tx
        fresh = [fields for fields in arrays if fields[M_ID] not in known]
        if not fresh:
            reply(None, known[arrays[0][M_ID]].message.seq, len(arrays))
            return
        leader = self.leaders.get(partition) if self.leaders and partition is not None else None
        if leader is not None:  # a replicated partition: as a publish (topic.publish)
            refused = leader.admit()
            if refused is not None:
                reply(refused, 0, 0)
                return
            reply = leader.wrap(reply)
        received_ms = int(time.time() * 1000)
        stored: list[list[StoredMessage]] = []

        def done(exc: BaseException | None) -> None:
            messages = stored[0] if stored else []
            if exc is not None or not messages:
                self.publish_failures += len(fresh)
                reply(exc, 0, 0)
                return
            self.tx_prepared += len(messages)
            self.published_bytes += size
            reply(None, messages[0].seq, len(arrays))
            self.trace.emit_messages("prepared", self.name, messages, app_id=app_id, client_host=client_host,
                                     ts_us=received_ms * 1000)

        stored.append(store.prepare(app_id, received_ms, fresh, conn_no, done, partition=partition))
        if leader is not None:
            leader.prepared(stored[0], app_id, received_ms, fresh)

    def end_tx(self, entry: TxEntry, commit: bool, reason: str, client_host: str | None,
               reply: Callable[[BaseException | None], None]) -> None:
        """Commit or roll back a prepared message (the caller checked that it is prepared). `reason`:
        "producer" for the producer's own EndTx, else what the control plane says (check, exhausted,
        manual): the trace event's detail records it and whether it came from a back-check."""
        m = entry.message
        leader = self.leaders.get(partition_of(m.seq)) if self.leaders else None
        if leader is not None:  # a replicated partition: ended here only while enough replicas are in sync
            refused = leader.admit()
            if refused is not None:
                reply(refused)
                return
        groups = self.routes(m.message_type) if commit else ()
        now_ms = int(time.time() * 1000)
        if leader is not None:  # answered once `min_insync` replicas hold the end
            reply = leader.tx_end(m.seq, m.id, commit, groups, now_ms, reason, reply)

        def done(exc: BaseException | None) -> None:
            reply(exc)
            if exc is not None:
                return
            if commit:
                self.tx_committed += 1
            else:
                self.tx_rolled_back += 1
            self.trace.emit("committed" if commit else "rolled_back", message_id=m.id, topic=self.name,
                            message_type=m.message_type, key=m.key, business_id=m.business_id, app_id=m.app_id,
                            client_host=client_host, detail=tx_detail(reason))
            for g in groups:
                if g in self.dropped:
                    self._finish([m], g)
                else:
                    self.group(g).enqueue_committed(m)

        self.store.end_tx(entry, commit, groups, now_ms, reason, done)

    # -- dead-letter re-drive ---------------------------------------------------------------------

    def redrive(self, group: str, dead: list[DeadLetter], reply: Callable[[BaseException | None], None],
                superseded: list[DeadLetter] = ()) -> None:
        """Deliver these dead letters (with bodies) to `group` again, as fresh messages (attempt 1).
        `superseded`: older dead letters of the same messages, retired without a delivery."""
        stored: list[list[StoredMessage]] = []

        def done(exc: BaseException | None) -> None:
            reply(exc)
            if exc is not None or not stored:
                return
            messages = stored[0]
            self.redriven += len(messages)
            for m, d in zip(messages, dead, strict=True):
                self.trace.emit("redriven", message_id=m.id, topic=self.name, message_type=m.message_type,
                                key=m.key, business_id=m.business_id, app_id=m.app_id, group=group,
                                detail=f"dead letter ({d.cause})"[:200])
            self.group(group).enqueue(messages)

        stored.append(self.store.redrive(group, dead, int(time.time() * 1000), done, superseded))

    def tick(self, now: float, now_ms: int) -> None:
        config = self.state.topics.get(self.name)
        retention_ms = int(config.retention_s * 1000) if config is not None else 0
        for group in self.groups.values():
            group.tick(now, now_ms, retention_ms)
        self.store.tick(now)
        if self.delayed is not None:
            self.delayed.tick(now)

    def stats(self) -> dict:
        config = self.state.topics.get(self.name)
        return {
            "revision": config.revision if config is not None else None,
            "status": config.status if config is not None else None,
            "held": self.store.held,
            "published": self.published,
            "published_bytes": self.published_bytes,
            "publish_failures": self.publish_failures,
            "tx": {"prepared": len(self.store.prepared), "prepared_total": self.tx_prepared,
                   "committed": self.tx_committed, "rolled_back": self.tx_rolled_back},
            "redriven": self.redriven,
            # (a follower's copy of a replicated topic's schedule: 0 here, so that sums over brokers count each once)
            "scheduled": self.delayed.count if self.delayed is not None and not self.delayed.passive else 0,
            "delayed": self.delayed.stats() if self.delayed is not None else None,
            "store": self.store.stats(),
            "groups": {name: g.stats() for name, g in sorted(self.groups.items())},
        }


def tx_detail(reason: str) -> str:
    """The `detail` of a committed / rolled_back trace event: the reason, and whether a back-check
    (anything but the producer's own EndTx) decided it."""
    return f"reason={reason} from_check={'false' if reason == 'producer' else 'true'}"
