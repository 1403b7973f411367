"""The broker's side of leader election (issue 20, item 2): what `replication.service` asks of the node when a
partition it holds is led here from now on (`_lead_partition`: reopened, so its groups deliver what it holds), is
followed from now on (`_follow_partition`), or holds a copy its leader refused (`_reset_partition`), and the copy
of a replicated topic's schedule emptied before its leader sends it anew (`_reset_schedule`). Mixed into
`Broker`, which holds `topics`, `state`, `options`, `loop`, `replication`, `_open_partition`, `open_schedule` and
`_placement_changed`."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable

from broker_core.delivery.positions import leave_partition
from broker_core.replication.follower import DIVERGED_MARK
from broker_core.storage.file_dead_letters import safe_name
from broker_core.storage.partitions import partition_dir
from broker_core.storage.schedule import SCHEDULE_FOLDER

log = logging.getLogger("broker_core.node")


class ReplicaHooks:
    def _replicated(self, name: str, pid: int) -> bool:
        """A partition of two or more replicas delivers here only once it is led here (`_lead_partition`)."""
        return len((self.state.placements.get(name) or {}).get(pid, ())) > 1

    def _lead_partition(self, name: str, pid: int) -> bool:
        """A partition this broker followed is led here now (elected): it is opened again, so its groups get what
        it holds (a follower's store delivers nothing). False while a flush job runs: refresh comes again."""
        topic = self.topics.get(name)
        if topic is None or pid not in topic.store.following:
            return True
        old = topic.store.stores[pid]
        if getattr(old, "busy", False):
            self.loop.call_later(0.005, self._placement_changed, name)
            return False
        old.close()
        topic.store.following.discard(pid)
        storage = "file" if topic.store.durable else "memory"
        topic.take_owed(topic.store.add(pid, self._open_partition(name, pid, storage) if storage == "file" else old))
        log.warning("topic %s: partition %d is led by this broker now", name, pid)
        return True

    def _follow_partition(self, name: str, pid: int) -> None:
        """A partition led here was deposed (or moved off this broker): what it appends from now on comes from its
        new leader, undelivered here, and what its groups hold of it waiting leaves them (the new leader owes it;
        what is in flight stays until answered)."""
        topic = self.topics.get(name)
        if topic is not None:
            topic.store.following.add(pid)
            left = sum(leave_partition(group, pid) for group in topic.groups.values())
            if left:
                log.info("topic %s: partition %d led elsewhere now; %d messages waiting here left to its new leader",
                         name, pid, left)

    def _reset_partition(self, name: str, pid: int, now: bool) -> None:
        """A followed partition whose copy its leader refused (replication/leader.py): emptied and fetched anew
        (`now`), or marked to be emptied at the next start (its groups hold its messages: led by this process)."""
        topic = self.topics.get(name)
        if topic is None or pid not in topic.store.stores:
            return
        old = topic.store.stores[pid]
        folder = partition_dir(self.options.data_dir / "topics" / safe_name(name), pid)
        if not now:
            if topic.store.durable:
                (folder / DIVERGED_MARK).touch()
            return
        if getattr(old, "busy", False):
            self.loop.call_later(0.01, self._reset_partition, name, pid, now)
            return
        old.close()
        storage = "file" if topic.store.durable else "memory"
        if storage == "file":
            shutil.rmtree(folder, ignore_errors=True)
        topic.store.add(pid, self._open_partition(name, pid, storage))  # (empty: owes nothing)
        log.warning("topic %s: partition %d emptied here, to be fetched again from its leader", name, pid)
        self.replication.refresh(name, topic)

    def _reset_schedule(self, name: str, then: Callable[[], None]) -> None:
        """Empty this broker's copy of the topic's schedule (a follower's: its leader sends the schedule anew,
        replication/schedule_sync.py), then `then()`. The files go by a rename, then in the background."""
        topic = self.topics.get(name)
        if topic is None or topic.delayed is None:
            then()
            return
        store = topic.delayed.store
        if store.busy:  # a job of the old copy still writes its files
            self.loop.call_later(0.01, self._reset_schedule, name, then)
            return
        store.discard()
        folder = getattr(store, "dir", None)
        if folder is not None:
            for old in folder.parent.glob(SCHEDULE_FOLDER + ".reset-*"):  # (left by a crash during an earlier one)
                shutil.rmtree(old, ignore_errors=True)
            if folder.is_dir():
                gone = folder.with_name(f"{SCHEDULE_FOLDER}.reset-{time.time_ns()}")
                os.rename(folder, gone)
                self.loop.run_in_executor(None, shutil.rmtree, gone, True)
        topic.replace_schedule(self.open_schedule(name, "file" if store.durable else "memory"))
        then()
