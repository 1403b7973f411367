"""A broker node: wires options, storage, topics, connections, ZooKeeper and the HTTP endpoints.

Start-up order matters for at-least-once: read what ZooKeeper holds (or the last snapshot of it,
when ZooKeeper does not answer), recover every topic from disk, listen, and only then register
in ZooKeeper, so clients never find a broker that cannot serve them yet.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import shutil
import signal
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

from broker_core import __version__
from broker_core.admin.http import start_http
from broker_core.auth import VerifiedCache
from broker_core.cluster.drain_marks import DrainMarks
from broker_core.cluster.membership import ZkMembership
from broker_core.cluster.state import App, Binding, ClusterState, TopicConfig
from broker_core.cluster.zk_acl import broker_credential
from broker_core.delivery.lifecycle import STORAGE_CHECK_S, Lifecycle
from broker_core.delivery.topic import Topic
from broker_core.delivery.transactions import TxService
from broker_core.node.counters import SAVE_S, CarriedCounters, live_counts
from broker_core.node.drain import DrainBarriers
from broker_core.node.options import Options
from broker_core.node.replicas import ReplicaHooks
from broker_core.node.server import ClientConnection
from broker_core.replication.election import StateWriter
from broker_core.replication.follower import DIVERGED_MARK
from broker_core.replication.service import Replication
from broker_core.storage.file_dead_letters import safe_name
from broker_core.storage.file_store import FileStore
from broker_core.storage.memory_store import MemoryStore
from broker_core.storage.partitions import (
    PartitionedStore,
    adopt_legacy_folder,
    partition_base,
    partition_dir,
)
from broker_core.storage.schedule import SCHEDULE_FOLDER, ScheduleStore
from broker_core.storage.schedule_file import FileSchedule
from broker_core.storage.schedule_memory import MemorySchedule
from broker_core.storage.store import TopicStore
from broker_core.tracing.process import ProcessTraceSink
from broker_core.tracing.sink import NullTraceSink, TraceSink

try:
    import uvloop
except ImportError:  # optional: plain asyncio works, slower
    uvloop = None

log = logging.getLogger("broker_core.node")


class Broker(ReplicaHooks):
    def __init__(self, options: Options, trace: TraceSink | None = None):
        self.options = options
        self.state = ClusterState()
        self.topics: dict[str, Topic] = {}
        self.connections: set[ClientConnection] = set()
        self.connections_per_host: dict[str, int] = {}  # kept by the connections (max_connections_per_host)
        self.refused_connections = 0
        self.verified = VerifiedCache()
        self.tx = TxService(self.topics, self.connections)
        self.lifecycle = Lifecycle(self.topics, self.state, options.data_dir, options.cluster, self.open_store,
                                   self.storage_for, open_schedule=self.open_schedule)
        self.auth_failures = 0
        self.counters = CarriedCounters(options.data_dir / "counters.json")  # what was counted before a restart
        self.node_id = ""
        self.trace: TraceSink = trace or NullTraceSink()
        self.started_at = time.time()
        self.replication = Replication(self.state, lambda: self.node_id,
                                       lag_timeout_s=options.replica_lag_timeout_ms / 1000)
        self.replication.promote, self.replication.demote = self._lead_partition, self._follow_partition
        self.replication.reset = self._reset_partition
        self.replication.reset_schedule = self._reset_schedule
        self.store_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="store")
        self.auth_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="auth")
        self.membership: ZkMembership | None = None
        self.drain = DrainBarriers(self)  # ordered topics' rescales (node/drain.py)
        self.server: asyncio.base_events.Server | None = None
        self.http = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        self._snapshot_due = False
        self.stopping = asyncio.Event()

    # -- start --------------------------------------------------------------------------------

    async def start(self) -> None:
        opts = self.options
        self.loop = asyncio.get_running_loop()
        opts.data_dir.mkdir(parents=True, exist_ok=True)
        self.node_id = opts.node_id or self._stored_node_id()
        if opts.trace and isinstance(self.trace, NullTraceSink):
            self.trace = await self._open_trace_writer()
        self.state.on_binding.append(self._binding_changed)
        self.state.on_app.append(self._app_changed)
        self.state.on_topic.append(self.lifecycle.topic_changed)
        self.state.on_placement.append(self._placement_changed)
        self.state.on_leadership.append(self._placement_changed)  # an election, or a broker came or went
        self.state.on_removed.append(self.lifecycle.removed)
        self.state.on_removed.append(self._removed)
        self.state.on_any.append(self._schedule_snapshot)

        info = {"node_id": self.node_id, "host": opts.advertise_host, "port": opts.port,
                "metrics_port": opts.metrics_port or None,
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at)),
                "version": __version__}
        self.membership = ZkMembership(opts.zk_hosts, opts.zk_chroot, self.node_id, info,
                                       notify=self.loop.call_soon_threadsafe, apply=self.state.apply,
                                       on_synced=self._zk_synced, on_meta=self.replication.meta_changed,
                                       session_timeout=opts.zk_session_timeout_s, credential=broker_credential())
        self.replication.writer = StateWriter(self.membership.client, opts.zk_chroot, self.loop.call_soon_threadsafe)
        self.drain.marks = DrainMarks(self.membership.client, self.membership.root, self.membership.node_acl)
        synced = await self.loop.run_in_executor(None, self.membership.start, opts.zk_start_timeout_s)
        await asyncio.sleep(0)  # let the state changes handed over by kazoo run
        if synced:
            self._write_snapshot()
        else:
            log.error("ZooKeeper %s did not answer within %.0fs; serving from the last snapshot and retrying",
                      opts.zk, opts.zk_start_timeout_s)
            self._load_snapshot()
        self.lifecycle.remove_tombstones()
        self._recover_topics()
        for name in list(self.state.placements):
            self._placement_changed(name)
        self.lifecycle.started()
        self.server = await self.loop.create_server(lambda: ClientConnection(self), opts.host, opts.port,
                                                    reuse_address=True, backlog=1024)
        if opts.metrics_port:
            self.http = await start_http(self, opts.metrics_host, opts.metrics_port, opts.admin_token,
                                         opts.max_http_connections)
        await self.loop.run_in_executor(None, self.membership.register)
        self._tasks = [asyncio.create_task(self._tick_loop(), name="tick"),
                       asyncio.create_task(self._zk_check_loop(), name="zk-check"),
                       asyncio.create_task(self.drain.run(), name="drain")]
        log.info("broker %s of cluster %s serving on %s:%s (storage %s, fsync %s)", self.node_id, opts.cluster,
                 opts.host, opts.port, opts.storage, opts.fsync)

    def _stored_node_id(self) -> str:
        path = self.options.data_dir / "node_id"
        if path.exists():
            return path.read_text().strip()
        node_id = f"{socket.gethostname()}-{self.options.port}-{uuid.uuid4().hex[:6]}"
        path.write_text(node_id + "\n")
        return node_id

    async def _open_trace_writer(self) -> TraceSink:
        directory = self.options.trace_dir or self.options.data_dir / "trace"
        return await ProcessTraceSink(directory, node_id=self.node_id, cluster=self.options.cluster,
                                      roll_bytes=self.options.trace_roll_mb and self.options.trace_roll_mb * 1024 * 1024,
                                      roll_s=self.options.trace_roll_s).start()

    def _recover_topics(self) -> None:
        root = self.options.data_dir / "topics"
        if not root.is_dir():
            return
        for path in sorted(root.iterdir()):
            if path.is_dir():
                self.topic(unquote(path.name), storage="file")

    # -- topics -------------------------------------------------------------------------------

    def topic(self, name: str, storage: str | None = None) -> Topic:
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        config: TopicConfig | None = self.state.topics.get(name)
        level = storage or self.storage_for(config)
        store = self.open_store(name, level)
        topic = Topic(name, store, self.state, trace=self.trace, max_credit=self.options.max_credit,
                      window=(self.options.backlog_window_messages, self.options.backlog_window_bytes),
                      schedule=self.open_schedule(name, level), call_later=self.loop.call_later)
        self.topics[name] = topic
        topic.group_made = self.drain.group_made
        topic.recover()
        self.replication.refresh(name, topic)
        return topic

    def storage_for(self, config: TopicConfig | None) -> str:
        """The storage level of a topic: its document's, else the cluster's (this broker's option)."""
        if config is not None and config.storage in ("file", "memory"):
            return config.storage
        return self.options.storage

    def open_store(self, name: str, storage: str) -> PartitionedStore:
        """A topic's store at that level: the partitions placed on this broker (not recovered yet)."""
        directory = self.options.data_dir / "topics" / safe_name(name)
        if storage != "memory" and adopt_legacy_folder(directory):
            log.info("topic %s: the folder of a broker from before partitions is now its partition 0", name)
        held = self.state.partitions_of(name, self.node_id)
        return PartitionedStore(directory, {pid: self._open_partition(name, pid, storage) for pid in held},
                                durable=storage != "memory", spare=MemoryStore(notify=self.loop.call_soon),
                                following={pid for pid in held if self.state.leader_of(name, pid) not in
                                           (None, self.node_id) or self._replicated(name, pid)},
                                single=name not in self.state.placements)

    def _open_partition(self, name: str, partition: int, storage: str) -> TopicStore:
        if storage == "memory":
            return MemoryStore(notify=self.loop.call_soon, first_seq=partition_base(partition))
        opts = self.options
        folder = partition_dir(opts.data_dir / "topics" / safe_name(name), partition)
        if (folder / DIVERGED_MARK).exists():  # its leader refused this copy before the restart: fetched anew
            log.warning("topic %s: partition %d emptied (its copy differed from its leader's)", name, partition)
            shutil.rmtree(folder)
        return FileStore(folder,
                         executor=self.store_executor, notify=self.loop.call_soon_threadsafe, fsync=opts.fsync,
                         segment_bytes=opts.segment_bytes, fsync_interval_s=opts.fsync_interval_ms / 1000,
                         retention_s=lambda: self._retention_s(name), idle_s=opts.segment_idle_s,
                         first_seq=partition_base(partition))

    def _placement_changed(self, name: str) -> None:
        """Partitions newly placed on this broker are opened (and recovered); a partition moved away stays
        until its topic goes (moving replicas is the rebalance's work)."""
        topic = self.topics.get(name)
        if topic is None:
            if self.state.partitions_of(name, self.node_id):
                self.drain.placement_changed(name)  # (its groups are made with a rescale's barrier)
                self.topic(name)  # held here from now on (a follower replicates it before any client comes)
            return
        for pid in self.state.partitions_of(name, self.node_id):
            if pid not in topic.store.stores:
                storage = "file" if topic.store.durable else "memory"
                owed = topic.store.add(pid, self._open_partition(name, pid, storage))
                if self._replicated(name, pid):
                    topic.store.following.add(pid)  # until the election says this broker leads it
                elif self.state.leader_of(name, pid) == self.node_id:  # a follower's partition delivers nothing
                    topic.take_owed(owed)
                log.info("topic %s: partition %d placed on this broker", name, pid)
        self.replication.refresh(name, topic)
        self.drain.placement_changed(name)

    def open_schedule(self, name: str, storage: str) -> ScheduleStore:
        """A topic's schedule store (delayed messages) at that level (not recovered yet): the file level's lives in
        the topic's folder (`schedule/`, made when the first delayed message comes)."""
        if storage == "memory":
            return MemorySchedule(notify=self.loop.call_soon)
        opts = self.options
        return FileSchedule(opts.data_dir / "topics" / safe_name(name) / SCHEDULE_FOLDER, executor=self.store_executor,
                            notify=self.loop.call_soon_threadsafe, fsync=opts.fsync,
                            fsync_interval_s=opts.fsync_interval_ms / 1000)

    def _retention_s(self, name: str) -> float | None:
        """The topic's retention from its ZooKeeper document (None: the topic is not known now)."""
        config = self.state.topics.get(name)
        return config.retention_s if config is not None else None

    # -- live changes from ZooKeeper ------------------------------------------------------------

    def _zk_synced(self) -> None:
        self.state.zk_synced()
        self.lifecycle.sweep()

    def _removed(self, kind: str, key: tuple[str, ...]) -> None:
        if kind == "topic":  # its data goes (lifecycle): so do its leaders and followers
            self.replication.forget(key[0])

    def _binding_changed(self, topic: str, group: str, binding: Binding | None) -> None:
        if topic in self.topics:
            self.topics[topic].binding_changed(group, binding)

    def _app_changed(self, app_id: str, app: App | None) -> None:
        self.verified.forget(app_id)
        if app is None or not app.active:
            for conn in list(self.connections):
                if conn.app_id == app_id:
                    conn.fail("auth_failed", f"app {app_id!r} was {'removed' if app is None else 'deactivated'}")

    def _schedule_snapshot(self) -> None:
        if not self._snapshot_due and self.state.ready:
            self._snapshot_due = True
            self.loop.call_later(1.0, self._write_snapshot)

    def _write_snapshot(self) -> None:
        self._snapshot_due = False
        path = self.options.data_dir / "cluster-state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state.snapshot()))
        os.replace(tmp, path)

    def _load_snapshot(self) -> None:
        path = self.options.data_dir / "cluster-state.json"
        if path.exists():
            self.state.load_snapshot(json.loads(path.read_text()))
            log.warning("loaded the cluster state snapshot of %s", time.ctime(path.stat().st_mtime))

    # -- timers -------------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        interval = self.options.tick_ms / 1000
        next_liveness = next_storage_check = next_save = 0.0
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            now_ms = int(time.time() * 1000)
            for topic in list(self.topics.values()):
                try:
                    topic.tick(now, now_ms)
                except Exception:
                    log.exception("tick of topic %s failed", topic.name)
            self.replication.tick(now)
            if now >= next_liveness:
                next_liveness = now + 0.1
                for conn in list(self.connections):
                    conn.check_liveness(now)
            if now >= next_storage_check:
                next_storage_check = now + STORAGE_CHECK_S
                self.lifecycle.tick()
            if now >= next_save:
                next_save = now + SAVE_S
                if self.state.ready:  # a deleted topic's counters go with it
                    self.counters.keep_only({*self.topics, *self.state.topics})
                self.counters.save(self._live_counts())

    async def _zk_check_loop(self) -> None:
        while True:
            await asyncio.sleep(5)
            await self.loop.run_in_executor(None, self.membership.check)

    # -- stop ---------------------------------------------------------------------------------

    async def stop(self) -> None:
        log.info("broker %s stopping", self.node_id)
        if self.membership is not None:
            await self.loop.run_in_executor(None, self.membership.stop)  # clients stop choosing us
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            conn.close("broker shutting down")
        self.replication.stop()
        for task in self._tasks:
            task.cancel()
        if self.http is not None:
            self.http.close()
        for topic in self.topics.values():
            while topic.store.busy:
                await asyncio.sleep(0.005)
            topic.store.close()
            if topic.delayed is not None:
                topic.delayed.close()
                while topic.delayed.store.busy:
                    await asyncio.sleep(0.005)
                topic.delayed.store.close()
        if self.state.ready:
            self._write_snapshot()
        self.counters.save(self._live_counts())
        self.trace.close()
        if hasattr(self.trace, "wait_closed"):
            await self.trace.wait_closed()
        self.store_executor.shutdown(wait=True)
        self.auth_executor.shutdown(wait=False)

    # -- reporting ------------------------------------------------------------------------------

    def _live_counts(self) -> dict:
        return live_counts({"auth_failures": self.auth_failures, "refused_connections": self.refused_connections},
                           self.topics)

    def stats(self) -> dict:
        """The JSON served at /stats:

        {"node_id": str, "cluster": str, "version": str, "started_at": float (epoch s), "uptime_s": float,
         "zookeeper": {"connected": bool, "registrations": int, "sessions_lost": int},
         "connections": int, "refused_connections": int (over max_connections[_per_host]), "auth_failures": int,
         "transactions": {"prepared", "checks_sent", "checks_answered", "checks_timed_out", "checks_waiting",
                          "listeners"},
         "trace": {"dropped": int (events), "waiting_bytes": int (shipped, not read by the trace process yet)}
                  | None (tracing off),
         "topics": {<topic>: {"revision": int|None, "status": "active"|"retired"|None, "held": int,
                              "leads": [int]|None,
                              "storage_wanted": "file"|"memory"|None,
                              "published": int, "published_bytes": int, "publish_failures": int,
                              "tx": {"prepared", "prepared_total", "committed", "rolled_back"}, "redriven": int,
                              "scheduled": int (delayed messages not due yet; 0 on a follower's copy),
                              "delayed": {"scheduled", "delivered", "in_memory", "passive", "loaded_through_ms",
                                          "lateness_ms_max", "store": {...}} | None,
                              "store": {"storage": "file"|"memory", ...},
                              "groups": {<group>: {"mode", "bound": bool, "depth", "in_flight",
                                                   "delivered", "acked", "nacked", "timed_out",
                                                   "redelivered", "dead_lettered", "expired", "retention_dropped",
                                                   "dead_letter_queue", "consumers", "revision",
                                                   "oldest_age_seconds", "on_disk"}}}}}

        `leads` (issue 20) lists the partitions this broker takes publishes for (None: the topic has no placement,
        every broker takes it; `store.partitions` those it holds). `revision` and `status` are those of the topic document this broker applies (None: it is not in ZooKeeper
        now), `held` what its groups still owe (memory level: messages, each counted once; file level: (message,
        group) pairs, from the segments' counts), `storage_wanted` a storage level the
        topic's document asks for that is not applied yet (it is once the topic holds no message). `depth` counts
        messages waiting (ready or in backoff, in memory or on disk), `on_disk` those of them left in the log (file
        level: past the group's window in memory), `oldest_age_seconds` the age of the oldest message the group owes
        (computed from the window's head and the log position, not by a scan), `in_flight` those sent and not yet
        acked, `dead_letter_queue` the
        entries in the group's dead-letter queue, `revision` that of the binding applied (None: not bound); the
        other group figures are counters (`retention_dropped`: dropped past the topic's
        retention). Counters add up across the broker's restarts (node/counters.py); `published` counts the
        messages made visible to the groups, committed transaction messages included (and delayed messages once
        they are due). `scheduled` counts the topic's delayed messages not yet due (or due and not yet appended to
        its log); under `delayed`, `delivered` counts those appended since the start, `in_memory` the entries of the
        loaded buckets, `lateness_ms_max` the most a batch came due late at the timer.
        """
        m = self.membership
        stats = {
            "node_id": self.node_id,
            "cluster": self.options.cluster,
            "version": __version__,
            "started_at": self.started_at,
            "uptime_s": round(time.time() - self.started_at, 3),
            "zookeeper": {"connected": bool(m and m.connected.is_set()),
                          "registrations": m.registrations if m else 0,
                          "sessions_lost": m.sessions_lost if m else 0},
            "connections": len(self.connections),
            "refused_connections": self.refused_connections,
            "auth_failures": self.auth_failures,
            "transactions": self.tx.stats(),
            "trace": self.trace.stats(),
            "topics": {name: {**t.stats(), "storage_wanted": self.lifecycle.storage_due.get(name),
                              "leads": self._leads(name), "replication": self.replication.stats(name)}
                       for name, t in sorted(self.topics.items())},
        }
        return self.counters.apply(stats, self._live_counts())


    def _leads(self, name: str) -> list[int] | None:
        """The partitions of the topic this broker takes publishes for (None: the topic has no placement)."""
        placed = self.state.placements.get(name)
        if placed is None:
            return None
        return sorted(pid for pid in placed if self.state.leader_of(name, pid) == self.node_id)


def run(options: Options) -> None:
    """Run a broker until SIGTERM or SIGINT."""
    async def main() -> None:
        broker = Broker(options)
        await broker.start()
        # Held messages are many small containers that live long; the default thresholds would
        # have the cyclic collector walk all of them again and again. Collect rarely, and leave
        # what exists after start-up (modules, recovered state) out of it.
        gc.collect()
        gc.freeze()
        gc.set_threshold(100_000, 50, 1000)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, broker.stopping.set)
        await broker.stopping.wait()
        await broker.stop()

    if uvloop is not None:
        uvloop.run(main())
    else:
        asyncio.run(main())
