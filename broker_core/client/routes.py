"""A topic's route (docs/routing.md): which cluster producers send to, which clusters consumers subscribe on.

- `Route`: one version of the route document, parsed and checked.
- `fetch_route`: the control plane's answer (`GET /api/v1/routes/<topic>/?environment=E`, token auth, ETag).
- `RouteCache`: the last route seen, on disk, per source (control-plane URL or ZooKeeper) + environment + topic,
  written atomically, for a client starting while its source is unreachable.

An endpoint that does not send the route fields yet (only `cluster`, `zk_connect`, `zk_chroot`, `zk_hosts`)
is read as a route of that one cluster, version 0.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from broker_core.client.errors import ControlPlaneError, ControlPlaneUnreachable, RouteUnknown

log = logging.getLogger("broker_core.client.routes")


def default_cache_dir() -> Path:
    return Path(os.environ.get("SWITCHYARD_CACHE_DIR") or Path.home() / ".cache" / "switchyard")


@dataclass(frozen=True)
class Route:
    """Where a topic's clients go. Clusters are named; `clusters` maps each name to its ZooKeeper connect
    string with chroot (the SDK's `zk=` form), which is how the SDK tells clusters apart."""

    topic: str
    version: int
    produce: str
    consume: tuple[str, ...]
    clusters: dict[str, str] = field(hash=False)
    environment: str | None = None
    synthetic: bool = False  # not a route document (an older endpoint's answer, no /routes node, brokers=)

    @property
    def produce_zk(self) -> str:
        return self.clusters[self.produce]

    @property
    def consume_zks(self) -> list[str]:
        return [self.clusters[name] for name in self.consume]

    @property
    def zks(self) -> list[str]:
        """Every cluster the route names (its connect strings), the produce cluster first."""
        return list(dict.fromkeys([self.produce_zk, *self.consume_zks, *self.clusters.values()]))

    def name_of(self, zk: str) -> str:
        return next((name for name, value in self.clusters.items() if value == zk), zk)

    def replaced_by(self, other: Route) -> bool:
        """Whether `other` is newer: a higher version, or a real document instead of a stand-in."""
        return other.version > self.version or (self.synthetic and not other.synthetic
                                                and other.version >= self.version)

    def document(self) -> dict:
        return {"topic": self.topic, "environment": self.environment, "version": self.version,
                "produce": self.produce, "consume": list(self.consume), "clusters": dict(self.clusters)}

    @classmethod
    def single(cls, topic: str, name: str, zk: str, environment: str | None = None) -> Route:
        """A route to one cluster, standing in for a missing route document."""
        return cls(topic, 0, name, (name,), {name: zk}, environment, synthetic=True)

    @classmethod
    def from_document(cls, doc: dict, topic: str) -> Route:
        """Parse a route document (REST or ZooKeeper); raises ValueError saying what is wrong with it."""
        if not isinstance(doc, dict):
            raise ValueError("a route document is a JSON object")
        if doc.get("topic", topic) != topic:
            raise ValueError(f"the document is the route of {doc.get('topic')!r}, not of {topic!r}")
        environment = doc.get("environment")
        if "produce" not in doc:  # an endpoint without the route fields: the one cluster it names
            zk = doc.get("zk_hosts") or (f"{doc['zk_connect']}{doc.get('zk_chroot') or ''}"
                                         if doc.get("zk_connect") else None)
            if not zk:
                raise ValueError("the document names no cluster (no produce, zk_hosts or zk_connect)")
            return cls.single(topic, str(doc.get("cluster") or zk), str(zk), environment)
        clusters, produce, consume, version = doc.get("clusters"), doc["produce"], doc.get("consume"), doc.get("version")
        if not isinstance(clusters, dict) or not clusters or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in clusters.items()):
            raise ValueError("clusters must map each cluster name to its ZooKeeper connect string")
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValueError("version must be a whole number >= 0")
        if not isinstance(consume, list) or not consume:
            raise ValueError("consume must list at least one cluster")
        unknown = [name for name in [produce, *consume] if name not in clusters]
        if unknown:
            raise ValueError(f"clusters does not say where {', '.join(map(str, unknown))} is")
        return cls(topic, version, produce, tuple(dict.fromkeys(consume)), dict(clusters), environment)


def route_url(control_plane: str, topic: str) -> str:
    return f"{control_plane.rstrip('/')}/api/v1/routes/{urllib.parse.quote(topic, safe='')}/"


async def fetch_route(control_plane: str, topic: str, environment: str, *, token: str | None = None,
                      timeout: float = 5.0, etag: str | None = None) -> tuple[Route | None, str | None]:
    """Ask the control plane for the route of `topic` in `environment`: (route, its ETag); (None, etag) when
    the answer is 304 Not Modified for `etag`. Raises RouteUnknown (404), ControlPlaneUnreachable (no
    answer, or a server error) or ControlPlaneError (refused: a missing or wrong token, a redirect, ...)."""
    url = route_url(control_plane, topic)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    if etag:
        headers["If-None-Match"] = etag
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            response = await client.get(url, params={"environment": environment}, headers=headers)
    except httpx.HTTPError as exc:
        raise ControlPlaneUnreachable(f"the control plane at {control_plane} did not answer "
                                      f"({type(exc).__name__}: {exc or 'no detail'})") from None
    status = response.status_code
    if status == 304 and etag:
        return None, etag
    if status == 404:
        raise RouteUnknown(f"no active topic {topic!r} in environment {environment!r} (the control plane at "
                           f"{control_plane} answered 404): check the topic's name and environment; a retired "
                           f"topic has no route", status)
    if status >= 500:
        raise ControlPlaneUnreachable(f"the control plane at {control_plane} failed ({status})", status)
    if status in (401, 403):
        raise ControlPlaneError(f"the control plane at {control_plane} refused to give the route of {topic!r} "
                                f"({status}: {_detail(response)}): pass api_token= a valid API token", status)
    if 300 <= status < 400:
        raise ControlPlaneError(f"the control plane answered {url} with a redirect ({status}) to "
                                f"{response.headers.get('location')}: give control_plane= its base URL", status)
    if status != 200:
        raise ControlPlaneError(f"the control plane refused the route of {topic!r} in {environment!r} "
                                f"({status}: {_detail(response)})", status)
    try:
        return Route.from_document(response.json(), topic), response.headers.get("etag")
    except (ValueError, KeyError) as exc:
        raise ControlPlaneError(f"the control plane at {control_plane} answered an unreadable route of "
                                f"{topic!r}: {exc}", status) from None


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:200]
    return json.dumps(body)[:200]


class RouteCache:
    """The last route of each topic, on disk, for one source (a control-plane URL or a ZooKeeper) and
    environment."""

    def __init__(self, cache_dir: Path | str | None, source: str, environment: str | None):
        self.dir = Path(cache_dir or default_cache_dir())
        self.source = source
        self.environment = environment

    def path(self, topic: str) -> Path:
        key = f"{self.source}\n{self.environment or ''}\n{topic}".encode()
        return self.dir / f"route-{hashlib.sha1(key).hexdigest()[:16]}.json"

    def load(self, topic: str) -> tuple[Route | None, str | None]:
        """The cached route and its ETag; (None, None) when there is none (or it cannot be read)."""
        try:
            saved = json.loads(self.path(topic).read_text())
            route = Route.from_document(saved["route"], topic)
            return (replace(route, synthetic=True) if saved.get("synthetic") else route), saved.get("etag")
        except (OSError, ValueError, KeyError, TypeError):
            return None, None

    def save(self, topic: str, route: Route, etag: str | None = None) -> None:
        path = self.path(topic)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"source": self.source, "environment": self.environment,
                                       "route": route.document(), "etag": etag,
                                       "synthetic": route.synthetic}))
            os.replace(tmp, path)
        except OSError as exc:
            log.debug("could not write the route cache %s: %s", path, exc)
