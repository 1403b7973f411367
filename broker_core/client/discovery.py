"""Finding a cluster's brokers, and reading a topic's route document, in the cluster's ZooKeeper.

- `ZkDiscovery(zk="host:port[,host:port]/switchyard/prod-a")` (the connect string with the chroot) watches
  `/brokers` there and keeps the list current; `watch_route(topic, ...)` watches `/routes/<topic>`,
  `watch_placement(topic, ...)` `/placement/<topic>`.
- `StaticDiscovery(brokers=["host:port", ...])`: a fixed list (no ZooKeeper; for tools and tests of the SDK).

Which cluster a topic's clients use is the `Locator`'s job (`broker_core.client.locator`).

One ZooKeeper client per ensemble per process: every ZkDiscovery of the same hosts shares it (each
chroot is a path prefix, not a kazoo chroot). Every broker list read from ZooKeeper is cached on disk
(`cache_dir`, default `$SWITCHYARD_CACHE_DIR` or `~/.cache/switchyard`), so a client starting while
ZooKeeper is down still finds the brokers it saw last.

kazoo calls back on its own threads: changes are handed to the event loop with call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import DataWatch
from kazoo.retry import KazooRetry

from broker_core.client.connection import BrokerAddress
from broker_core.client.errors import NoBrokers, ZooKeeperUnreachable
from broker_core.client.routes import default_cache_dir
from broker_core.layout import LAYOUT

log = logging.getLogger("broker_core.client.discovery")


T = TypeVar("T")


class BrokerFollower(Generic[T]):
    """Something kept per broker of a cluster's list: `start(address)` makes it when the broker is listed. A broker
    that leaves the list keeps it, for it may be restarting with messages on disk, until it has been away
    `forget_after` seconds: its owner asks `gone_too_long(address)` before trying it again, and drops it then."""

    def __init__(self, discovery: Discovery, start: Callable[[BrokerAddress], T], forget_after: float):
        self.discovery = discovery
        self.forget_after = forget_after
        self.items: dict[BrokerAddress, T] = {}
        self.closed = False
        self._start = start
        self._left: dict[BrokerAddress, float] = {}  # brokers no longer listed, since when
        discovery.listeners.append(self._changed)
        self._changed(discovery.candidates())

    def _changed(self, brokers: list[BrokerAddress]) -> None:
        if self.closed:
            return
        now = time.monotonic()
        for address in brokers:
            self._left.pop(address, None)
            if address not in self.items:
                self.items[address] = self._start(address)
        for address in self.items:
            if address not in brokers:
                self._left.setdefault(address, now)

    def gone_too_long(self, address: BrokerAddress) -> bool:
        left = self._left.get(address)
        return left is not None and time.monotonic() - left > self.forget_after

    def close(self) -> None:
        """Stop following the list; what was made stays in `items` for the owner to end."""
        self.closed = True
        if self._changed in self.discovery.listeners:
            self.discovery.listeners.remove(self._changed)


class Discovery:
    """The live brokers of one cluster, kept current; `listeners` are called on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str = ""):
        self.loop = loop
        self.name = name
        self.brokers: list[BrokerAddress] = []
        self.last_known: list[BrokerAddress] = []  # the last non-empty list, for failover when all look gone
        self.listeners: list[Callable[[list[BrokerAddress]], None]] = []
        self.ready = asyncio.Event()

    async def start(self, timeout: float) -> None:
        self.ready.set()

    def stop(self) -> None:
        return None

    def watch_placement(self, topic: str, callback: Callable[[dict | None], None]) -> None:
        """No ZooKeeper: no placement (every broker takes every topic)."""
        self.loop.call_soon(callback, None)

    def watch_partition_state(self, topic: str, partition: int, callback: Callable[[dict | None], None]) -> None:
        """No ZooKeeper: no partition state (no placement either)."""

    def _set(self, brokers: list[BrokerAddress]) -> None:
        if brokers:
            self.last_known = brokers
        if brokers != self.brokers:
            self.brokers = brokers
            for listener in list(self.listeners):
                listener(brokers)
        self.ready.set()

    def candidates(self) -> list[BrokerAddress]:
        """Brokers to try: the live ones, or the last ones seen when none is listed right now."""
        return self.brokers or self.last_known

    async def wait_for_brokers(self, timeout: float) -> list[BrokerAddress]:
        """The brokers to try; raises NoBrokers (or ZooKeeperUnreachable) when none is known in time."""
        deadline = self.loop.time() + timeout
        await self.start(timeout)
        if not self.candidates() and self.ready.is_set():  # listed none yet: one may be registering
            try:
                await asyncio.wait_for(self._nonempty(), max(0.0, deadline - self.loop.time()))
            except TimeoutError:
                pass
        if not self.candidates():
            raise self.no_brokers()
        return self.candidates()

    def no_brokers(self) -> NoBrokers:
        return NoBrokers(f"no broker listed for cluster {self.name}")

    async def _nonempty(self) -> None:
        while not self.candidates():
            await asyncio.sleep(0.05)


class StaticDiscovery(Discovery):
    def __init__(self, loop: asyncio.AbstractEventLoop, brokers: list[str]):
        super().__init__(loop, ",".join(brokers))
        self._set([_parse_address(a) for a in brokers])


def _parse_address(text: str) -> BrokerAddress:
    host, _, port = text.rpartition(":")
    return BrokerAddress(node_id=text, host=host or "127.0.0.1", port=int(port))


class _SharedClients:
    """One started KazooClient per ZooKeeper ensemble (hosts) per process, shared by reference count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[int, str], list] = {}  # (pid, hosts) -> [client, users]

    def acquire(self, hosts: str) -> KazooClient:
        with self._lock:
            entry = self._clients.get((os.getpid(), hosts))
            if entry is None:
                client = KazooClient(hosts=hosts, timeout=10.0,
                                     connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2.0),
                                     command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0))
                client.start_async()
                entry = self._clients[(os.getpid(), hosts)] = [client, 0]
            entry[1] += 1
            return entry[0]

    def release(self, hosts: str) -> None:
        with self._lock:
            entry = self._clients.get((os.getpid(), hosts))
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del self._clients[(os.getpid(), hosts)]
        try:
            entry[0].stop()
            entry[0].close()
        except Exception as exc:  # stopping must not fail a shutdown
            log.debug("zookeeper stop: %s", exc)


CLIENTS = _SharedClients()


class ZkDiscovery(Discovery):
    def __init__(self, loop: asyncio.AbstractEventLoop, zk: str, cache_dir: Path | None = None, name: str = ""):
        super().__init__(loop, name or zk)
        self.zk = zk
        self.hosts, _, chroot = zk.partition("/")
        self.root = ("/" + chroot).rstrip("/") if chroot else ""
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self.cache_path = self.cache_dir / f"brokers-{hashlib.sha1(zk.encode()).hexdigest()[:16]}.json"
        self.client: KazooClient | None = None
        self.stopped = False
        self._watching = False
        self._lock = threading.Lock()
        self._routes: dict[str, list[Callable[[dict | None], None]]] = {}  # document path -> callbacks, on the loop
        self._route_watches: set[str] = set()
        self.last_known = self._read_cache()  # tried when no broker is listed (all restarting, or ZooKeeper away)

    def begin(self) -> None:
        """Start connecting (once); the broker list and route documents follow by themselves."""
        if self.client is not None or self.stopped:
            return
        self.client = CLIENTS.acquire(self.hosts)
        self.client.add_listener(self._on_state)
        if self.client.connected:  # a shared client connected earlier: no CONNECTED event will come
            self.client.handler.spawn(self._watch)

    async def start(self, timeout: float) -> None:
        """Connect and read the list; when ZooKeeper does not answer in time, use the cached list."""
        self.begin()
        if self.ready.is_set():
            return
        try:
            await asyncio.wait_for(self.ready.wait(), timeout)
        except TimeoutError:
            cached = self._read_cache()
            if cached:
                log.warning("ZooKeeper %s did not answer within %.2gs; using the cached broker list (%d brokers)",
                            self.zk, timeout, len(cached))
                self._set(cached)
            else:
                log.warning("ZooKeeper %s did not answer within %.2gs and no broker list is cached", self.zk,
                            timeout)

    def no_brokers(self) -> NoBrokers:
        if self.client is None or not self.client.connected:
            return ZooKeeperUnreachable(
                f"ZooKeeper {self.hosts} (cluster {self.name}) does not answer and no broker list of the cluster "
                f"is cached in {self.cache_dir}: check that ZooKeeper is running and reachable from here, and "
                f"the connect string ({self.zk})")
        return NoBrokers(f"no broker of cluster {self.name} is registered in ZooKeeper ({self.zk}, under "
                         f"{LAYOUT.BROKERS}): start the cluster's brokers, or check the chroot of the connect string")

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.client is not None:
            self.client.remove_listener(self._on_state)
            CLIENTS.release(self.hosts)

    def _post(self, fn, *args) -> bool:
        """Hand a result to the loop; False once this discovery or its loop is gone (the watch then ends)."""
        if self.stopped:
            return False
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed
            self.stopped = True
            return False
        return True

    def _on_state(self, state: str) -> None:
        if state == "CONNECTED" and not self.stopped:
            self.client.handler.spawn(self._watch)

    def _watch(self) -> None:
        with self._lock:
            documents = list(self._routes)
        for relative in documents:
            self._watch_route(relative)
        with self._lock:
            if self._watching or self.stopped:
                return
            self._watching = True
        path = self.root + LAYOUT.BROKERS
        live = []

        def on_children(children: list[str]):
            if self.stopped:
                return False
            brokers = []
            for node_id in sorted(children):
                try:
                    data, _ = self.client.get(f"{path}/{node_id}")
                    info = json.loads(data or b"{}")
                    brokers.append(BrokerAddress(node_id, str(info["host"]), int(info["port"])))
                except (NoNodeError, KeyError, ValueError):
                    continue  # gone meanwhile, or not a broker document
                except KazooException as exc:
                    log.warning("reading %s/%s: %s", path, node_id, exc)
            self._write_cache(brokers)
            return None if self._post(self._set, brokers) else False

        def on_exists(data, stat):
            if stat is None:
                live.clear()
                return None if self._post(self._set, []) else False
            if not live:
                live.append(True)
                self.client.ChildrenWatch(path, on_children)
            return None if not self.stopped else False

        try:
            self.client.DataWatch(path, on_exists)
        except KazooException as exc:
            log.warning("watching %s: %s", path, exc)
            with self._lock:
                self._watching = False

    # -- documents: routes, placements -----------------------------------------------------------

    def watch_route(self, topic: str, callback: Callable[[dict | None], None]) -> None:
        """Call `callback(document or None)` on the loop with `/routes/<topic>` as read now, then at each
        change (None: no node, or an unreadable one). Again after a lost session."""
        self.watch_document(LAYOUT.route(topic), callback)

    def watch_placement(self, topic: str, callback: Callable[[dict | None], None]) -> None:
        """The same for `/placement/<topic>` (issue 20: the brokers holding each partition of the topic)."""
        self.watch_document(LAYOUT.placement(topic), callback)

    def watch_partition_state(self, topic: str, partition: int, callback: Callable[[dict | None], None]) -> None:
        """`/partition-state/<topic>/<p>` (issue 20): the partition's elected leader."""
        self.watch_document(LAYOUT.partition_state(topic, partition), callback)

    def watch_document(self, relative: str, callback: Callable[[dict | None], None]) -> None:
        with self._lock:
            self._routes.setdefault(relative, []).append(callback)
        self.begin()
        if self.client is not None and self.client.connected:
            self.client.handler.spawn(self._watch_route, relative)

    def _watch_route(self, relative: str) -> None:
        with self._lock:
            if relative in self._route_watches or self.stopped:
                return
            self._route_watches.add(relative)
        path = self.root + relative

        def on_data(data, stat):
            doc = None
            if data:
                try:
                    doc = json.loads(data)
                except ValueError:
                    log.warning("%s in ZooKeeper %s is not JSON; ignored", path, self.hosts)
            return None if self._post(self._route_read, relative, doc) else False

        try:
            DataWatch(self.client, path, on_data)
        except KazooException as exc:  # e.g. not readable: go on with the document as it is (tried again on reconnect)
            log.warning("watching %s in ZooKeeper %s: %s", path, self.hosts, exc)
            with self._lock:
                self._route_watches.discard(relative)
            self._post(self._route_read, relative, None)

    def _route_read(self, relative: str, doc: dict | None) -> None:
        with self._lock:
            callbacks = list(self._routes.get(relative, ()))
        for callback in callbacks:
            callback(doc)

    # -- broker list cache ----------------------------------------------------------------------

    def _read_cache(self) -> list[BrokerAddress]:
        try:
            return [BrokerAddress(**b) for b in json.loads(self.cache_path.read_text())["brokers"]]
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def _write_cache(self, brokers: list[BrokerAddress]) -> None:
        if not brokers:
            return  # keep the last non-empty list: it is what helps when ZooKeeper is away
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps({"zk": self.zk, "brokers": [b.__dict__ for b in brokers]}))
            os.replace(tmp, self.cache_path)
        except OSError as exc:
            log.debug("could not write the broker cache %s: %s", self.cache_path, exc)
