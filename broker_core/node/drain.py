"""The drain barrier of ordered topics' rescales (issue 21 item 2, docs/ordered-topics.md): the broker's side.

A placement with a new key mapping (`layout.Mapping`, version v) moves some keys to another partition. A moved
key's messages must not reach a group from the new partition before the group finished everything of the key's
old partition stored under the old mapping:
- as soon as the broker applies version v, every ordered group holds moved keys back (`OrderedGroup.set_barrier`,
  all old partitions that lost keys undrained);
- the broker leading such an old partition notes where its log ends then (`cuts`: a publish it had taken and
  not stored yet is below it; a publish of a moved key that comes later is refused with `stale_mapping`), and
  writes `/drained/<topic>/v<v>/<partition>-<group>` once the group owes nothing below that point; its store must
  have been seen idle once after the cut, so what it was storing then has reached the groups;
- every broker reads the markers every POLL_S and lets the keys of drained old partitions go on.
ZooKeeper's calls block: they run off the event loop. A marker that cannot be read keeps its keys waiting.
"""

from __future__ import annotations

import asyncio
import logging

from broker_core.cluster.drain_marks import DrainMarks
from broker_core.delivery.ordered import OrderedGroup
from broker_core.layout import Mapping, drain_marker

log = logging.getLogger("broker_core.node")

POLL_S = 0.2


class _Pending:
    """One topic's mapping version not yet drained on this broker."""

    __slots__ = ("mapping", "losing", "cuts", "idle_seen", "present")

    def __init__(self, mapping: Mapping):
        self.mapping = mapping
        self.losing = frozenset(mapping.losing())
        self.cuts: dict[int, int] = {}  # old partition led here -> the end of its log when it was first led so
        self.idle_seen: set[int] = set()  # of those, the ones whose store was idle once since
        self.present: set[str] = set()  # the markers read


class DrainBarriers:
    def __init__(self, broker):
        self.broker = broker  # topics, state, node_id
        self.marks: DrainMarks | None = None  # set once ZooKeeper's client exists
        self.pending: dict[str, _Pending] = {}
        self.done: dict[str, int] = {}  # topic -> the mapping version it finished draining (in this process)

    def _mapping(self, name: str) -> Mapping | None:
        """The topic's mapping when it is ordered and its latest rescale moved keys, else None."""
        config = self.broker.state.topics.get(name)
        mapping = self.broker.state.mappings.get(name)
        if config is None or not config.ordered or mapping is None or not mapping.version:
            return None
        return mapping if mapping.previous != mapping.partitions else None

    def placement_changed(self, name: str) -> None:
        """A topic's placement (or the topic) was applied: a new mapping version holds moved keys back at once."""
        mapping = self._mapping(name)
        pending = self.pending.get(name)
        if mapping is None or self.done.get(name) == mapping.version:
            if pending is not None:
                del self.pending[name]
                self._apply(name, None)
            return
        if pending is None or pending.mapping != mapping:
            self.pending[name] = pending = _Pending(mapping)
            log.info("topic %s: mapping version %d (%d -> %d partitions); moved keys wait for partitions %s to "
                     "drain", name, mapping.version, mapping.previous, mapping.partitions, sorted(pending.losing))
        self._apply(name, pending)

    def group_made(self, group) -> None:
        """A group made while a rescale drains starts with its moved keys held back."""
        pending = self.pending.get(group.topic)
        if pending is not None and isinstance(group, OrderedGroup):
            group.set_barrier(pending.mapping, self._undrained(pending, group.name))

    def _undrained(self, pending: _Pending, group: str) -> set[int]:
        return {p for p in pending.losing if drain_marker(p, group) not in pending.present}

    def _apply(self, name: str, pending: _Pending | None) -> None:
        topic = self.broker.topics.get(name)
        for group in list(topic.groups.values()) if topic is not None else ():
            if isinstance(group, OrderedGroup):
                if pending is None:
                    group.set_barrier(None, ())
                else:
                    group.set_barrier(pending.mapping, self._undrained(pending, group.name))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(POLL_S)
            for name in list(self.pending):
                try:
                    await self._poll(loop, name)
                except Exception:
                    log.exception("drain barrier of topic %s: poll failed (tried again)", name)

    async def _poll(self, loop, name: str) -> None:
        b = self.broker
        pending, topic = self.pending.get(name), b.topics.get(name)
        if pending is None or topic is None:
            return
        stores = topic.store.stores
        led = {p for p in pending.losing if p in stores and b.state.leader_of(name, p) == b.node_id}
        for p in led - set(pending.cuts):
            pending.cuts[p] = stores[p].next_seq  # (led here from now: after a restart or an election, too)
        for p in set(pending.cuts) - led:
            del pending.cuts[p]
            pending.idle_seen.discard(p)
        settled = set(pending.idle_seen)
        pending.idle_seen |= {p for p in pending.cuts if getattr(stores[p], "idle", True)}
        groups = [g for g in topic.groups.values() if isinstance(g, OrderedGroup) and g.mode == "clustering"]
        wanted = [drain_marker(p, g.name) for g in groups for p in sorted(settled)
                  if drain_marker(p, g.name) not in pending.present and not g.owes_below(p, pending.cuts[p])]
        version = pending.mapping.version
        if wanted:
            written = await loop.run_in_executor(None, self.marks.write, name, version, wanted)
            if written:
                log.info("topic %s v%d: drained %s", name, version, ", ".join(written))
        present = await loop.run_in_executor(None, self.marks.read, name, version)
        if present is None or self.pending.get(name) is not pending:
            return
        pending.present = present
        self._apply(name, pending)
        if groups and all(not self._undrained(pending, g.name) for g in groups):
            log.info("topic %s: mapping version %d drained for every group", name, version)
            self.done[name] = version
            del self.pending[name]
            self._apply(name, None)
