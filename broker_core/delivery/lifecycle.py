"""The life of governed objects on this broker, as the control plane writes it into ZooKeeper.

- **A topic node removed** (`/topics/<t>`): this broker no longer holds the topic. Its subscriptions end
  ("topic <t> was deleted"), publishes are refused as to an unknown topic, and all of its data goes: the
  store is discarded (what waited to be written fails), the topic's folder is renamed at once to
  `<data dir>/deleted/<folder>-<random>` (so a topic of the same name that comes back starts empty), and
  that tombstone is deleted in the background. A crash midway leaves the tombstone, which the next start
  deletes.
- **A binding node removed** (`/bindings/<t>/<g>`): the group goes (`Topic.drop_group`): its
  subscriptions end ("binding removed"), its backlog is finished for it and its dead letters are deleted.
- **A topic's storage level changed**: a store is not converted with messages in it; the new level applies
  as soon as the topic holds no message and no prepared message on this broker (at once when it holds none),
  its dead letters carried over. Until then `/stats` shows the level wanted (`storage_wanted`).
- **At start**, once ZooKeeper has been read in full: the data of topics and groups that are not in ZooKeeper
  (removed while the broker was down, or a crash came midway) is deleted the same way.

Data is deleted only while `/meta` names the cluster this broker serves (`--cluster`): a broker started
on the wrong chroot keeps everything and says so. A node that exists but cannot be read is treated as
absent, never as removed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from broker_core.cluster.state import ClusterState, TopicConfig
from broker_core.delivery.topic import Topic
from broker_core.storage.file_store import FileStore
from broker_core.storage.schedule import ScheduleStore
from broker_core.storage.store import TopicStore

log = logging.getLogger("broker_core.lifecycle")

STORAGE_CHECK_S = 1.0


def storage_of(store: TopicStore) -> str:
    return "file" if store.durable else "memory"


class Lifecycle:
    """Works on the node's own `topics` (it removes deleted ones); `open_store` makes a topic's store at a level,
    `storage_for` says the level a topic's document asks for."""

    def __init__(self, topics: dict[str, Topic], state: ClusterState, data_dir: Path, cluster: str,
                 open_store: Callable[[str, str], TopicStore], storage_for: Callable[[TopicConfig | None], str],
                 open_schedule: Callable[[str, str], ScheduleStore] | None = None):
        self.topics = topics
        self.state = state
        self.data_dir = data_dir
        self.cluster = cluster
        self.open_store = open_store
        self.storage_for = storage_for
        self.open_schedule = open_schedule  # a topic's schedule store (delayed messages) at a level
        self.recovered = False  # the topics on disk have been opened
        self.storage_due: dict[str, str] = {}  # topic -> storage level wanted, not applied yet
        self._tasks: set[asyncio.Task] = set()

    @property
    def tombstones(self) -> Path:
        return self.data_dir / "deleted"

    # -- listeners of ClusterState ----------------------------------------------------------

    def removed(self, kind: str, key: tuple[str, ...]) -> None:
        if kind not in ("topic", "binding") or not self._may_delete(f"{kind} {'/'.join(key)}"):
            return
        if kind == "topic":
            self.delete_topic(key[0])
        else:
            topic = self.topics.get(key[0])
            if topic is not None:
                topic.drop_group(key[1])

    def _may_delete(self, what: str) -> bool:
        """Data is deleted only for what is missing from this broker's own cluster: its /meta names the cluster
        this broker serves (a broker started on the wrong chroot keeps everything)."""
        cluster = (self.state.meta or {}).get("cluster")
        if cluster == self.cluster:
            return True
        log.error("%s is not in ZooKeeper, but its data is kept: /meta names cluster %r, this broker serves %r; "
                  "check --zk and --cluster", what, cluster, self.cluster)
        return False

    def topic_changed(self, name: str, config: TopicConfig | None) -> None:
        if config is not None and name in self.topics:
            self.check_storage(name)

    # -- deleting ---------------------------------------------------------------------------

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name, None)
        self.storage_due.pop(name, None)
        if topic is None:
            return
        topic.close(f"topic {name} was deleted")
        if topic.delayed is not None:
            topic.delayed.store.discard()  # its files go with the topic's folder
        self._discard(topic.store)
        log.info("topic %s deleted on this broker with %d messages still owed to its groups", name, topic.store.held)

    def _discard(self, store: TopicStore) -> None:
        """Discard a store and delete its data (the folder is moved away now, deleted once its files closed)."""
        store.discard()
        if not store.durable:
            return
        tombstone = self.tombstones / f"{store.dir.name}-{uuid.uuid4().hex[:8]}"
        try:
            self.tombstones.mkdir(exist_ok=True)
            os.rename(store.dir, tombstone)
        except FileNotFoundError:
            return
        task = asyncio.get_running_loop().create_task(self._remove(store, tombstone))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove(self, store: FileStore, tombstone: Path) -> None:
        while store.busy:  # its last flush job still writes into the (renamed) files
            await asyncio.sleep(0.01)
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(shutil.rmtree, tombstone, ignore_errors=True))

    def remove_tombstones(self) -> None:
        """At start: what deletions a crash interrupted leaves behind."""
        if self.tombstones.is_dir():
            for path in self.tombstones.iterdir():
                log.info("deleting %s, left by a deletion a stop interrupted", path)
                shutil.rmtree(path, ignore_errors=True)

    def started(self) -> None:
        """The topics on disk are open: apply what ZooKeeper says of them (when it was read already)."""
        self.recovered = True
        self.sweep()
        for name in list(self.topics):
            self.check_storage(name)

    def sweep(self) -> None:
        """Delete what this broker holds of topics and bindings that are not in ZooKeeper (once it has been read
        in full, and the topics on disk opened)."""
        state = self.state
        if not (state.ready and self.recovered):
            return
        topics = [name for name in self.topics
                  if name not in state.topics and ("topic", (name,)) not in state.unreadable]
        groups = [(name, group) for name, topic in self.topics.items() if name not in topics
                  for group in sorted(topic.known_groups())
                  if state.binding(name, group) is None and ("binding", (name, group)) not in state.unreadable]
        if not (topics or groups) or not self._may_delete(f"{len(topics)} topics and {len(groups)} bindings"):
            return
        for name in topics:
            log.info("topic %s is no longer in ZooKeeper", name)
            self.delete_topic(name)
        for name, group in groups:
            log.info("binding %s/%s is no longer in ZooKeeper", name, group)
            self.topics[name].drop_group(group)

    # -- storage level ----------------------------------------------------------------------

    def check_storage(self, name: str) -> None:
        """Apply the topic's storage level if it changed and the topic holds nothing that would have to move."""
        topic = self.topics.get(name)
        config = self.state.topics.get(name)
        if topic is None or config is None:
            return
        wanted = self.storage_for(config)
        if wanted == storage_of(topic.store):
            self.storage_due.pop(name, None)
            return
        store = topic.store
        if (store.held or store.prepared or not store.idle or (topic.delayed is not None and topic.delayed.count)
                or any(g.depth() or g.in_flight() for g in topic.groups.values())):
            if name not in self.storage_due:
                log.info("topic %s: storage %s wanted; applied once its %d messages are delivered", name, wanted,
                         store.held + len(store.prepared))
            self.storage_due[name] = wanted
            return
        self._replace_store(topic, wanted)
        self.storage_due.pop(name, None)

    def _replace_store(self, topic: Topic, storage: str) -> None:
        old = topic.store
        new = self.open_store(topic.name, storage)
        new.recover()
        new.next_seq = max(new.next_seq, old.next_seq)  # late acks never match a new message
        carried = 0
        for group in sorted(old.dead_index.live):
            dead = old.dead_letters(group, old.dead_letter_count(group))
            if dead:
                carried += len(dead)
                new.import_dead_letters(group, dead, functools.partial(self._carried, topic.name, group))
        topic.replace_store(new)
        if self.open_schedule is not None:
            topic.replace_schedule(self.open_schedule(topic.name, storage))
        self._discard(old)
        log.info("topic %s: storage is now %s (%d dead letters carried over)", topic.name, storage, carried)

    @staticmethod
    def _carried(topic: str, group: str, exc: BaseException | None) -> None:
        if exc is not None:
            log.error("topic %s: the dead letters of group %s could not be stored at the new storage level: %s",
                      topic, group, exc)

    def tick(self) -> None:
        for name in list(self.storage_due):
            self.check_storage(name)
