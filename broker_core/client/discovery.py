"""Finding a cluster's brokers: in its ZooKeeper, or through the control plane's route endpoint.

- ZooKeeper: `zk="host:port[,host:port]/switchyard/prod-a"` (the connect string with the chroot).
  The SDK watches `/brokers` there and keeps the list current.
- Route endpoint: `control_plane="http://cp:8000"`, `environment="prod"`, `api_token="..."` (the
  endpoint takes token auth); the SDK asks `GET /api/v1/routes/<topic>/?environment=prod`, which
  answers the cluster serving the topic as JSON with `zk_connect` and `zk_chroot` (a ready
  `zk_hosts` is accepted too), then watches that ZooKeeper as above.
- Fixed list: `brokers=["host:port", ...]` (no ZooKeeper; for tools and tests of the SDK itself).

Every list read from ZooKeeper is cached on disk (`cache_dir`, default
`$SWITCHYARD_CACHE_DIR` or `~/.cache/switchyard`), so a client starting while ZooKeeper is down
still finds the brokers it saw last.

kazoo calls back on its own thread: changes are handed to the event loop with call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.retry import KazooRetry

from broker_core.client.connection import BrokerAddress
from broker_core.client.errors import NoBrokers
from broker_core.layout import LAYOUT

log = logging.getLogger("broker_core.client.discovery")


def default_cache_dir() -> Path:
    return Path(os.environ.get("SWITCHYARD_CACHE_DIR") or Path.home() / ".cache" / "switchyard")


def resolve_route(control_plane: str, topic: str, environment: str, timeout: float = 5.0,
                  token: str | None = None) -> str:
    """Ask the control plane which cluster serves `topic`; returns its ZooKeeper hosts with chroot."""
    url = (f"{control_plane.rstrip('/')}/api/v1/routes/{urllib.parse.quote(topic, safe='')}/"
           f"?environment={urllib.parse.quote(environment)}")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Token {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (URL given by the app)
        doc = json.loads(response.read())
    if doc.get("zk_hosts"):
        return str(doc["zk_hosts"])
    return f"{doc['zk_connect']}{doc.get('zk_chroot') or ''}"


class Discovery:
    """The live brokers of one cluster, kept current; `on_change` callbacks run on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.brokers: list[BrokerAddress] = []
        self.last_known: list[BrokerAddress] = []  # the last non-empty list, for failover when all look gone
        self.listeners: list[Callable[[list[BrokerAddress]], None]] = []
        self.ready = asyncio.Event()

    async def start(self, timeout: float) -> None:
        self.ready.set()

    def stop(self) -> None:
        return None

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
        if not self.candidates():
            try:
                await asyncio.wait_for(self._nonempty(), timeout)
            except TimeoutError:
                raise NoBrokers("no live broker found for the cluster") from None
        return self.candidates()

    async def _nonempty(self) -> None:
        while not self.candidates():
            await asyncio.sleep(0.05)


class StaticDiscovery(Discovery):
    def __init__(self, loop: asyncio.AbstractEventLoop, brokers: list[str]):
        super().__init__(loop)
        self._set([_parse_address(a) for a in brokers])


def _parse_address(text: str) -> BrokerAddress:
    host, _, port = text.rpartition(":")
    return BrokerAddress(node_id=text, host=host or "127.0.0.1", port=int(port))


class ZkDiscovery(Discovery):
    def __init__(self, loop: asyncio.AbstractEventLoop, zk: str, cache_dir: Path | None = None):
        super().__init__(loop)
        self.zk = zk
        hosts, _, chroot = zk.partition("/")
        self.root = ("/" + chroot).rstrip("/") if chroot else ""
        self.cache_path = Path(cache_dir or default_cache_dir()) / f"brokers-{hashlib.sha1(zk.encode()).hexdigest()[:16]}.json"
        self.client = KazooClient(hosts=hosts, timeout=10.0,
                                  connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2.0),
                                  command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0))
        self._watching = False
        self._lock = threading.Lock()
        self.last_known = self._read_cache()  # tried when no broker is listed (all restarting, or ZooKeeper away)
        self.client.add_listener(self._on_state)

    async def start(self, timeout: float) -> None:
        """Connect and read the list; when ZooKeeper does not answer in time, use the cached list."""
        self.client.start_async()
        try:
            await asyncio.wait_for(self.ready.wait(), timeout)
        except TimeoutError:
            cached = self._read_cache()
            if cached:
                log.warning("ZooKeeper %s did not answer within %.0fs; using the cached broker list (%d brokers)",
                            self.zk, timeout, len(cached))
                self._set(cached)
            else:
                log.warning("ZooKeeper %s did not answer within %.0fs and no broker list is cached", self.zk,
                            timeout)

    def stop(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except Exception as exc:  # stopping must not fail a shutdown
            log.debug("zookeeper stop: %s", exc)

    def _on_state(self, state: str) -> None:
        if state == "CONNECTED":
            self.client.handler.spawn(self._watch)

    def _watch(self) -> None:
        with self._lock:
            if self._watching:
                return
            self._watching = True
        path = self.root + LAYOUT.BROKERS
        live = []

        def on_children(children: list[str]) -> None:
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
            self.loop.call_soon_threadsafe(self._set, brokers)

        def on_exists(data, stat) -> None:
            if stat is None:
                live.clear()
                self.loop.call_soon_threadsafe(self._set, [])
            elif not live:
                live.append(True)
                self.client.ChildrenWatch(path, on_children)

        try:
            self.client.DataWatch(path, on_exists)
        except KazooException as exc:
            log.warning("watching %s: %s", path, exc)
            with self._lock:
                self._watching = False

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
            tmp = self.cache_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"zk": self.zk, "brokers": [b.__dict__ for b in brokers]}))
            os.replace(tmp, self.cache_path)
        except OSError as exc:
            log.debug("could not write the broker cache %s: %s", self.cache_path, exc)


class Locator:
    """Where the SDK looks for brokers: one of zk=, control_plane= (+ environment=), brokers=.

    `discovery(topic)` gives the (shared, started) Discovery of the cluster that serves the topic.
    """

    def __init__(self, *, zk: str | None = None, control_plane: str | None = None, environment: str | None = None,
                 brokers: list[str] | None = None, cache_dir: Path | None = None, api_token: str | None = None,
                 start_timeout: float = 5.0):
        if not (zk or brokers or (control_plane and environment)):
            raise ValueError("give zk=, control_plane= with environment=, or brokers=")
        self.zk = zk
        self.control_plane = control_plane
        self.environment = environment
        self.brokers = brokers
        self.cache_dir = cache_dir
        self.api_token = api_token
        self.start_timeout = start_timeout
        self._by_cluster: dict[str, Discovery] = {}
        self._routes: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def cluster_of(self, topic: str) -> str:
        if self.brokers:
            return ",".join(self.brokers)
        if self.zk:
            return self.zk
        if topic not in self._routes:
            loop = asyncio.get_running_loop()
            self._routes[topic] = await loop.run_in_executor(
                None, lambda: resolve_route(self.control_plane, topic, self.environment, token=self.api_token))
        return self._routes[topic]

    async def discovery(self, topic: str) -> Discovery:
        cluster = await self.cluster_of(topic)
        async with self._lock:
            found = self._by_cluster.get(cluster)
            if found is None:
                loop = asyncio.get_running_loop()
                if self.brokers:
                    found = StaticDiscovery(loop, self.brokers)
                else:
                    found = ZkDiscovery(loop, cluster, self.cache_dir)
                await found.start(self.start_timeout)
                self._by_cluster[cluster] = found
        return found

    def stop(self) -> None:
        for found in self._by_cluster.values():
            found.stop()
        self._by_cluster.clear()
