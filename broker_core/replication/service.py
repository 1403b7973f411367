"""Which partitions this broker leads or follows (issue 20, item 2).

A partition of two or more replicas has a `PartitionLeader` on the broker its `/partition-state` names leader
(election.py elects it; without a partition state, the placement's first replica leads, statically) and a
`PartitionFollower` on every other replica, following the leader of the current epoch. A follower elected leader
is promoted (`promote`: the broker reopens its partition so its groups deliver it); a leader deposed steps down
(`demote`).
`min_insync` is the cluster's (`/meta`); the cluster secret comes from `SWITCHYARD_BROKER_CLUSTER_SECRET` or the
mode-600 file `SWITCHYARD_BROKER_CLUSTER_SECRET_FILE` names (never argv).
"""

from __future__ import annotations

import functools
import logging
import time

from broker_core.layout import partition_state
from broker_core.replication.election import PREFERRED_WAIT_S, StateWriter, decide
from broker_core.replication.follower import PartitionFollower, set_log_epoch
from broker_core.replication.leader import NotLed, PartitionLeader
from broker_core.replication.schedule_sync import ScheduleFollowing, ScheduleLeading
from broker_core.secret_source import read_secret

log = logging.getLogger("broker_core.replication")

SECRET_VAR = "SWITCHYARD_BROKER_CLUSTER_SECRET"


class Replication:
    def __init__(self, state, node_id, heartbeat_s: float = 1.0, lag_timeout_s: float = 2.0):
        self.state = state
        self.node_id = node_id  # a callable: the node id is known once the broker starts
        self.secret = read_secret(SECRET_VAR, default="") or ""
        self.heartbeat_s = heartbeat_s
        self.lag_timeout_s = lag_timeout_s
        self.leaders: dict[tuple[str, int], PartitionLeader] = {}
        self.followers: dict[tuple[str, int], PartitionFollower] = {}
        self.writer: StateWriter | None = None  # set once ZooKeeper is connected (None: no elections)
        self.promote = lambda name, pid: True  # the broker's: a followed partition is led here from now on
        self.demote = lambda name, pid: None  # the broker's: a led partition is followed here from now on
        self.reset = lambda name, pid, now: None  # the broker's: empty a diverged copy (now, or at the next start)
        self.reset_schedule = lambda name, then: then()  # the broker's: empty a copy of a topic's schedule
        self._led: set[tuple[str, int]] = set()  # partitions led by this process: their groups hold messages
        self._diverged: set[tuple[str, int]] = set()  # copies refused by their leader, emptied at the next start
        self.topics: dict[str, object] = {}
        self._writing: set[tuple[str, int]] = set()  # partitions whose state this broker is writing
        self._seen: set[tuple[str, int]] = set()  # partitions this process led or followed
        self._next_review = 0.0
        self._unelected: dict[tuple[str, int], float] = {}  # partitions seen at epoch 0: since when
        self.elections = 0

    def min_insync(self) -> int:
        return int((self.state.meta or {}).get("min_insync") or 1)

    def meta_changed(self, doc: dict | None) -> None:
        """The cluster's /meta changed: a lower `min_insync` answers what waited for the replicas it no longer needs
        (a higher one holds what waits until as many replicas hold it)."""
        self.state.set_meta(doc)
        for leader in self.leaders.values():
            leader.review_waiting()

    def _leader_address(self, topic: str, partition: int):
        node = self.state.leader_of(topic, partition)
        info = self.state.brokers.get(node or "")
        return (info["host"], int(info["port"])) if info else None

    def refresh(self, name: str, topic) -> None:
        """Lead or follow the topic's replicated partitions this broker holds, as its partition states (else its
        placement) say now; elect where election.py says this broker should."""
        me = self.node_id()
        self.topics[name] = topic
        led: dict[int, object] = {}
        placed = self.state.placements.get(name) or {}
        if topic.delayed is not None and len(placed.get(0, ())) < 2:
            topic.delayed.activate()  # (unreplicated: each broker's own schedule delivers, as before placements)
        for pid, replicas in placed.items():
            key, store = (name, pid), topic.store.stores.get(pid)
            if len(replicas) < 2 or store is None or me not in replicas:
                leader = self.leaders.pop(key, None)  # (a partition held from before its placement, or moved away
                if leader is not None:               # by a rebalance: neither leads nor follows here)
                    leader.step_down("this broker is no longer one of its replicas")
                    self.demote(*key)  # what its groups hold of it waiting goes: its new leader delivers it
                self._stop_following(key)
                if pid == 0 and topic.delayed is not None and len(replicas) > 1:
                    topic.delayed.deactivate()  # its replicas keep the schedule, not this broker
                continue
            st = self.state.partition_state(name, pid)
            if st is None:
                if key not in self._seen:
                    log.info("topic %s partition %d: no /partition-state read yet (the control plane creates it "
                             "with the placement): not led here until it comes", name, pid)
                    self._seen.add(key)
            else:
                self._elect(key, replicas, st, store)
                if st["leader_epoch"] == 0:
                    pass  # not elected yet: the first registered replica is electing itself
                elif self.state.leader_of(name, pid) == me:
                    self._lead(key, store, st, topic)
                else:
                    self._follow(key, store, st["leader"], st["leader_epoch"])
            led[pid] = self.leaders.get(key) or NotLed(name, pid)
        topic.leaders = led
        if led:
            topic.store.on_finished = functools.partial(self._finished, name)

    def _finished(self, name: str, pid: int, group: str, seqs: list[int]) -> None:
        leader = self.leaders.get((name, pid))
        if leader is not None:
            leader.finished(group, seqs)

    def _lead(self, key, store, st: dict, topic) -> None:
        leader = self.leaders.get(key)
        epoch = st["leader_epoch"]
        if leader is not None and leader.epoch == epoch:
            return
        if leader is not None:
            leader.step_down(f"epoch {epoch} began")
        self._stop_following(key)
        if not self.promote(*key):  # its store is busy: the broker calls refresh again
            self.leaders.pop(key, None)
            return
        store = topic.store.stores[key[1]]
        self._seen.add(key)
        me = self.node_id()
        set_log_epoch(store, epoch)  # what it stores from now on is this epoch's
        self._led.add(key)
        self.leaders[key] = PartitionLeader(
            key[0], key[1], store, self.min_insync, node_id=me, epoch=epoch, isr=set(st["isr"]) | {me},
            lag_timeout_s=self.lag_timeout_s, write_isr=functools.partial(self._write_isr, key),
            start_seq=st.get("epoch_start_seq", 0))
        if key[1] == 0 and topic.delayed is not None:  # its replicas keep the topic's delayed messages: active here
            sync = self.leaders[key].schedule = ScheduleLeading(self.leaders[key], topic)
            topic.delayed.replicas = sync
            topic.delayed.activate()
        log.info("topic %s partition %d: led by this broker (epoch %d)", key[0], key[1], epoch)

    def _follow(self, key, store, leader_node: str, epoch: int) -> None:
        leader = self.leaders.pop(key, None)
        if leader is not None:
            leader.step_down(f"epoch {epoch} is led by {leader_node or 'nobody yet'}")
        self.demote(*key)  # (also a partition opened before its placement or state was read)
        follower = self.followers.get(key)
        if follower is not None and follower.following == (leader_node, epoch):
            return
        self._stop_following(key)
        if key in self._diverged:
            return  # its copy is emptied at the next start: until then it does not follow
        if not self.secret:
            log.error("topic %s partition %d: this broker follows it but has no cluster secret (%s_FILE): "
                      "it cannot replicate", key[0], key[1], SECRET_VAR)
            return
        self._seen.add(key)
        follower = PartitionFollower(key[0], key[1], store, self.node_id(),
                                     lambda n=key[0], q=key[1]: self._leader_address(n, q), self.secret,
                                     self.heartbeat_s, epoch=lambda e=epoch: e)
        follower.following = (leader_node, epoch)
        follower.on_diverged = functools.partial(self._diverged_copy, key)
        topic = self.topics.get(key[0])
        if key[1] == 0 and topic is not None and topic.delayed is not None:  # a passive copy of its schedule
            topic.delayed.deactivate()
            follower.schedule = ScheduleFollowing(topic, functools.partial(self.reset_schedule, key[0]))
        self.followers[key] = follower
        follower.start()

    def _diverged_copy(self, key) -> None:
        """The leader refused this copy (it may hold a deposed leader's messages): a copy that only followed is
        emptied now and fetched anew; one led by this process (its groups hold its messages) at the next start."""
        self.followers.pop(key, None)
        now = key not in self._led
        if not now:
            self._diverged.add(key)
            log.error("topic %s partition %d: this broker's copy differs from the leader's since it was deposed; it "
                      "is emptied and fetched again at the next start of this broker (until then it does not "
                      "follow)", key[0], key[1])
        self.reset(key[0], key[1], now)

    # -- elections (election.py) ---------------------------------------------------------------

    def _elect(self, key, replicas, st: dict, store) -> None:
        if self.writer is None or not self.state.ready or key in self._writing:
            return
        patient = False
        if st["leader_epoch"] == 0:  # (a partition's other replicas wait a while for its preferred one)
            patient = time.monotonic() - self._unelected.setdefault(key, time.monotonic()) < PREFERRED_WAIT_S
        else:
            self._unelected.pop(key, None)
        doc = decide(self.node_id(), replicas, st, self.state.brokers, key not in self._seen, store.next_seq, patient)
        if doc is not None:
            log.warning("topic %s partition %d: electing %s for epoch %d (leader was %s, epoch %d)", key[0], key[1],
                        doc["leader"], doc["leader_epoch"], st["leader"], st["leader_epoch"])
            self._write(key, doc, st["version"], lambda ok: None)

    def _write_isr(self, key, isr: set[str]) -> None:
        st = self.state.partition_state(*key)
        leader = self.leaders.get(key)
        if st is None or leader is None or key in self._writing or st["leader"] != self.node_id() \
                or st["leader_epoch"] != leader.epoch:
            if leader is not None:
                leader.isr_written(None)
            return
        doc = partition_state(self.node_id(), leader.epoch, sorted(isr), st.get("epoch_start_seq", 0))
        self._write(key, doc, st["version"], lambda ok: leader.isr_written(set(isr) if ok else None))

    def _write(self, key, doc: dict, version: int, then) -> None:
        self._writing.add(key)

        def done(new_version: int | None) -> None:
            self._writing.discard(key)
            if new_version is not None:
                if doc["leader_epoch"] != (self.state.partition_state(*key) or {}).get("leader_epoch"):
                    self.elections += 1
                self.state.apply("pstate", (key[0], str(key[1])), {**doc, "version": new_version})
            then(new_version is not None)

        self.writer.write(key[0], key[1], doc, version, done)

    def forget(self, name: str) -> None:
        self.topics.pop(name, None)
        for key in [k for k in self.leaders if k[0] == name]:
            del self.leaders[key]
        for key in [k for k in self.followers if k[0] == name]:
            self._stop_following(key)

    def _stop_following(self, key) -> None:
        follower = self.followers.pop(key, None)
        if follower is not None:
            follower.stop()

    # -- a follower's connection ---------------------------------------------------------------

    def fetch(self, conn, ev) -> None:
        leader = self.leaders.get((ev.topic, ev.partition))
        if leader is not None and ev.leader_epoch > leader.epoch:  # fenced: another broker leads a newer epoch
            leader.step_down(f"follower {conn.client_id} follows epoch {ev.leader_epoch}")
        if leader is None or leader.deposed or ev.leader_epoch != leader.epoch:
            conn.error(None, "not_leader", f"this broker does not lead partition {ev.partition} of {ev.topic!r} "
                                           f"at epoch {ev.leader_epoch}")
            return
        leader.fetch(conn, ev.from_seq, ev.log_epoch)

    def stored(self, conn, ev) -> None:
        leader = self.leaders.get((ev.topic, ev.partition))
        if leader is not None:
            leader.stored(conn, ev.through_seq)

    def tx_stored(self, conn, ev) -> None:
        leader = self.leaders.get((ev.topic, ev.partition))
        if leader is not None:
            leader.tx_stored(conn, ev.number)

    def schedule_stored(self, conn, ev) -> None:
        leader = self.leaders.get((ev.topic, ev.partition))
        if leader is not None and leader.schedule is not None:
            leader.schedule.stored(conn, ev.number)

    def gone(self, conn) -> None:
        for leader in self.leaders.values():
            leader.gone(conn)

    def tick(self, now: float) -> None:
        for leader in self.leaders.values():
            leader.tick(now)
        if self.writer is not None and now >= self._next_review:  # elections a failed write left undone
            self._next_review = now + 1.0
            for name, topic in list(self.topics.items()):
                self.refresh(name, topic)

    def stop(self) -> None:
        for key in list(self.followers):
            self._stop_following(key)

    def stats(self, name: str) -> dict:
        return {"min_insync": self.min_insync(), "elections": self.elections,
                "leading": {str(pid): leader.stats() for (t, pid), leader in self.leaders.items() if t == name},
                "following": {str(pid): f.stats() for (t, pid), f in self.followers.items() if t == name}}
