"""Where a topic's clients go, kept current: the live route of each topic and the brokers of each cluster.

One of three sources, given to every producer and consumer:

- `control_plane="http://cp:8000"`, `environment="prod"`, `api_token="..."`: the route endpoint is asked
  once per topic at start (`GET /api/v1/routes/<topic>/?environment=prod`, token auth); its answer is cached
  on disk (`cache_dir`) and used when the control plane does not answer at start. Then `/routes/<topic>` is
  watched in the ZooKeeper of every cluster the route names: the control plane is not needed after the start.
- `zk="host:port/switchyard/prod-a"`: `/routes/<topic>` is read and watched in that ZooKeeper (and then in
  every cluster it names); no node means "this cluster only".
- `brokers=["host:port", ...]`: a fixed list, no route (tools and tests of the SDK itself).

A route document with a higher `version` replaces the route, whichever cluster it was read from; a deleted
node changes nothing. Route listeners (`on_route`) run on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.client.discovery import Discovery, StaticDiscovery, ZkDiscovery
from broker_core.client.errors import ControlPlaneUnreachable
from broker_core.client.routes import Route, RouteCache, fetch_route

log = logging.getLogger("broker_core.client.locator")

RouteListener = Callable[[Route], None]


@dataclass
class _Followed:
    route: Route
    listeners: list[RouteListener] = field(default_factory=list)
    watched: set[str] = field(default_factory=set)  # clusters (connect strings) whose /routes/<topic> is watched
    read: dict[str, asyncio.Event] = field(default_factory=dict)  # cluster -> its node was read once


class Locator:
    """The routes of the topics a client uses and the Discovery of each cluster they name (one per cluster
    per Locator; they share one ZooKeeper client per ensemble per process). Use it on one event loop."""

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
        self.cache = RouteCache(cache_dir, f"zk:{zk}" if zk else str(control_plane), environment)
        self._by_cluster: dict[str, Discovery] = {}
        self._followed: dict[str, _Followed] = {}
        self._starting: dict[str, asyncio.Task] = {}
        self.stopped = False

    # -- routes ---------------------------------------------------------------------------------

    async def route(self, topic: str) -> Route:
        """The topic's route now; the first call finds it (and starts following it). Raises RouteUnknown,
        ControlPlaneUnreachable or ControlPlaneError when the control plane cannot give it."""
        followed = self._followed.get(topic)
        if followed is not None:
            return followed.route
        task = self._starting.get(topic)
        if task is None:
            task = self._starting[topic] = asyncio.get_running_loop().create_task(self._start_following(topic))
            task.add_done_callback(lambda _t: self._starting.pop(topic, None))
        return await asyncio.shield(task)

    def current(self, topic: str) -> Route | None:
        followed = self._followed.get(topic)
        return followed.route if followed is not None else None

    def on_route(self, topic: str, listener: RouteListener) -> None:
        """Call `listener(route)` on the loop whenever the topic's route changes (after `await route(topic)`)."""
        self._followed[topic].listeners.append(listener)

    def remove_route_listener(self, topic: str, listener: RouteListener) -> None:
        followed = self._followed.get(topic)
        if followed is not None and listener in followed.listeners:
            followed.listeners.remove(listener)

    def named_clusters(self) -> set[str]:
        """Every cluster (connect string) named by the route of a followed topic."""
        return {zk for followed in self._followed.values() for zk in followed.route.zks}

    async def _start_following(self, topic: str) -> Route:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout
        if self.brokers:
            key = ",".join(self.brokers)
            self._followed[topic] = _Followed(Route.single(topic, key, key))
            return self._followed[topic].route
        if self.zk:
            cached, _ = self.cache.load(topic)
            route = cached or Route.single(topic, self.zk, self.zk)
            home = self.zk
        else:
            route = await self._ask_control_plane(topic)
            home = route.produce_zk
        followed = self._followed[topic] = _Followed(route)
        self._watch(topic, followed, [home])
        # the route named by the REST answer or the cache may be older than the one in ZooKeeper: read that first
        try:
            await asyncio.wait_for(followed.read[home].wait(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            log.info("route of %s: ZooKeeper %s did not answer in time; going on with route version %d (produce %s)",
                     topic, home, followed.route.version, followed.route.produce)
        return followed.route

    async def _ask_control_plane(self, topic: str) -> Route:
        cached, etag = self.cache.load(topic)
        try:
            route, etag = await fetch_route(self.control_plane, topic, self.environment, token=self.api_token,
                                            timeout=self.start_timeout, etag=etag if cached else None)
        except ControlPlaneUnreachable as exc:
            if cached is not None:
                log.warning("%s; using the cached route of %s (version %d, produce %s)", exc, topic, cached.version,
                            cached.produce)
                return cached
            raise ControlPlaneUnreachable(
                f"{exc}, and no route of topic {topic!r} in {self.environment!r} is cached in {self.cache.dir}: "
                f"check control_plane= and that the control plane is running (a client that reached it once "
                f"keeps the route for later starts)", exc.status) from None
        if route is None:  # 304: the cached one is current
            return cached
        self.cache.save(topic, route, etag)
        return route

    def _watch(self, topic: str, followed: _Followed, extra: list[str] = ()) -> None:
        for zk in [*extra, *followed.route.zks]:
            if zk in followed.watched:
                continue
            followed.watched.add(zk)
            followed.read.setdefault(zk, asyncio.Event())
            discovery = self.discovery_for(zk, followed.route.name_of(zk))
            discovery.watch_route(topic, lambda doc, zk=zk: self._route_read(topic, zk, doc))

    def _route_read(self, topic: str, zk: str, doc: dict | None) -> None:
        followed = self._followed.get(topic)
        if followed is None or self.stopped:
            return
        followed.read[zk].set()
        if doc is None:
            return  # no node, or deleted: the route stays as it is
        try:
            route = Route.from_document(doc, topic)
        except (ValueError, KeyError) as exc:
            log.warning("route of %s in ZooKeeper %s is not usable (%s); ignored", topic, zk, exc)
            return
        if not followed.route.replaced_by(route):
            return
        followed.route = route
        log.info("route of %s: version %d, produce %s, consume %s", topic, route.version, route.produce,
                 ",".join(route.consume))
        self.cache.save(topic, route)
        self._watch(topic, followed)
        for listener in list(followed.listeners):
            try:
                listener(route)
            except Exception:
                log.exception("route listener of %s failed", topic)

    # -- clusters -------------------------------------------------------------------------------

    def discovery_for(self, zk: str, name: str = "") -> Discovery:
        """The Discovery of one cluster (by connect string), created and connecting on first use."""
        found = self._by_cluster.get(zk)
        if found is None:
            loop = asyncio.get_running_loop()
            if self.brokers:
                found = StaticDiscovery(loop, self.brokers)
            else:
                found = ZkDiscovery(loop, zk, self.cache_dir, name)
                found.begin()
            self._by_cluster[zk] = found
        return found

    async def ready_discovery(self, zk: str, name: str = "", timeout: float | None = None) -> Discovery:
        """The cluster's Discovery once it knows a broker; raises ZooKeeperUnreachable or NoBrokers in time."""
        found = self.discovery_for(zk, name)
        await found.wait_for_brokers(self.start_timeout if timeout is None else timeout)
        return found

    async def discovery(self, topic: str) -> Discovery:
        """The ready Discovery of the cluster the topic's producers send to now."""
        route = await self.route(topic)
        return await self.ready_discovery(route.produce_zk, route.produce)

    def stop(self) -> None:
        self.stopped = True
        for found in self._by_cluster.values():
            found.stop()
        self._by_cluster.clear()
        for task in self._starting.values():
            task.cancel()
