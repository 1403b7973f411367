"""The broker's HTTP side: GET /metrics (Prometheus), /stats (JSON), /deadletters, /healthz, and the
admin API under /admin/ (`broker_core.admin`, docs/broker-admin-api.md).

It runs on the broker's event loop, so it reads the live objects without locks; figures are
computed at request time from the counters the topics and groups keep (no per-message metric
calls on the hot path). The /stats shape is documented in `Broker.stats`.

    GET /deadletters?topic=T&group=G&limit=N   the group's dead letters, oldest first (JSON;
                                               bodies as UTF-8 text when they decode, else base64)
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from broker_core.admin import MAX_BODY, Admin, BadRequest

if TYPE_CHECKING:
    from broker_core.node import Broker

log = logging.getLogger("broker_core.http")

GROUP_GAUGES = {
    "depth": "Messages waiting in the group (ready or in backoff)",
    "in_flight": "Messages delivered and not yet acked",
    "consumers": "Subscriptions connected to the group on this broker",
    "dead_letter_queue": "Entries in the group's dead-letter queue",
}
GROUP_COUNTERS = {
    "delivered": "Deliveries, first ones and redeliveries",
    "acked": "Messages acked",
    "nacked": "Nacks received",
    "timed_out": "Deliveries whose ack timed out",
    "redelivered": "Deliveries after the first",
    "dead_lettered": "Messages moved to the dead-letter queue after their delivery limit",
    "expired": "Messages moved to the dead-letter queue after their TTL",
}


class BrokerCollector:
    def __init__(self, broker: Broker):
        self.broker = broker

    def collect(self):
        stats = self.broker.stats()
        labels = {"cluster": stats["cluster"], "node": stats["node_id"]}
        base = list(labels)
        conns = GaugeMetricFamily("switchyard_broker_connections", "Client connections", labels=base)
        conns.add_metric(list(labels.values()), stats["connections"])
        yield conns
        zk = GaugeMetricFamily("switchyard_broker_zookeeper_connected", "1 when the ZooKeeper session is up",
                               labels=base)
        zk.add_metric(list(labels.values()), 1 if stats["zookeeper"]["connected"] else 0)
        yield zk
        auth = CounterMetricFamily("switchyard_broker_auth_failures", "Refused authentications", labels=base)
        auth.add_metric(list(labels.values()), stats["auth_failures"])
        yield auth
        published = CounterMetricFamily("switchyard_topic_published", "Messages stored", labels=[*base, "topic"])
        pub_bytes = CounterMetricFamily("switchyard_topic_published_bytes", "Bytes stored", labels=[*base, "topic"])
        gauges = {k: GaugeMetricFamily(f"switchyard_group_{k}", h, labels=[*base, "topic", "group"])
                  for k, h in GROUP_GAUGES.items()}
        counters = {k: CounterMetricFamily(f"switchyard_group_{k}", h, labels=[*base, "topic", "group"])
                    for k, h in GROUP_COUNTERS.items()}
        for topic, t in stats["topics"].items():
            values = [*labels.values(), topic]
            published.add_metric(values, t["published"])
            pub_bytes.add_metric(values, t["published_bytes"])
            for group, g in t["groups"].items():
                for k, family in gauges.items():
                    family.add_metric([*values, group], g[k])
                for k, family in counters.items():
                    family.add_metric([*values, group], g[k])
        yield published
        yield pub_bytes
        yield from gauges.values()
        yield from counters.values()


def _json_safe_entry(entry: dict) -> dict:
    body = entry.get("body", b"")
    try:
        entry["body"], entry["body_encoding"] = body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        entry["body"], entry["body_encoding"] = base64.b64encode(body).decode("ascii"), "base64"
    return entry


async def _lingering_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           limit: int = 64 * 1024 * 1024, seconds: float = 2.0) -> None:
    """After refusing a body unread: half-close and discard what the client still sends (bounded), so it
    reads the answer instead of a connection reset (closing with unread input sends RST)."""
    if writer.can_write_eof():
        writer.write_eof()
    deadline = asyncio.get_running_loop().time() + seconds
    discarded = 0
    while discarded < limit:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return
        chunk = await asyncio.wait_for(reader.read(65536), timeout=remaining)
        if not chunk:
            return
        discarded += len(chunk)


class HttpEndpoints:
    def __init__(self, broker: Broker):
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker))
        self.admin = Admin(broker)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            lines = head.decode("latin-1").split("\r\n")
            method, target = lines[0].split(" ")[:2]
            if urlsplit(target).path.startswith("/admin/"):
                headers = dict((k.strip().lower(), v.strip()) for k, _, v in (h.partition(":") for h in lines[1:] if h))
                status, ctype, body = await self.route_admin(method, target, headers, reader)
            else:
                status, ctype, body = self.route(method, target)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            status, ctype, body = 400, "text/plain", b"bad request\n"
        except Exception:
            log.exception("http request failed")
            status, ctype, body = 500, "text/plain", b"internal error\n"
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                  405: "Method Not Allowed", 413: "Payload Too Large", 500: "Error"}
        writer.write(f"HTTP/1.1 {status} {reason.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        try:
            await asyncio.wait_for(writer.drain(), timeout=5)
            if status == 413:
                await _lingering_close(reader, writer)
        except (TimeoutError, ConnectionError):
            pass
        writer.close()

    async def route_admin(self, method: str, target: str, headers: dict[str, str],
                          reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
        """Read a bounded JSON body, hand the request to `Admin` and encode its answer."""
        url = urlsplit(target)
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY:
            status, answer = 413, {"error": "too_large", "message": f"request bodies are limited to {MAX_BODY} bytes"}
        else:
            body: object = None
            if length:
                raw = await asyncio.wait_for(reader.readexactly(length), timeout=10)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = BadRequest("the request body is not valid JSON")
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            status, answer = await self.admin.handle(method, url.path, query, headers, body)
        return status, "application/json", json.dumps(answer).encode()

    def route(self, method: str, target: str) -> tuple[int, str, bytes]:
        if method != "GET":
            return 405, "text/plain", b"GET only\n"
        url = urlsplit(target)
        if url.path == "/metrics":
            return 200, "text/plain; version=0.0.4; charset=utf-8", generate_latest(self.registry)
        if url.path == "/stats":
            return 200, "application/json", json.dumps(self.broker.stats()).encode()
        if url.path == "/healthz":
            return 200, "application/json", json.dumps({"ok": True, "node_id": self.broker.node_id}).encode()
        if url.path == "/deadletters":
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            topic = self.broker.topics.get(q.get("topic", ""))
            if topic is None or q.get("group") not in topic.groups:
                return 404, "application/json", b'{"error": "no such topic or group on this broker"}'
            limit = max(1, min(int(q.get("limit", 100)), 10_000))
            entries = [_json_safe_entry(d.to_dict()) for d in topic.store.dead_letters(q["group"], limit)]
            return 200, "application/json", json.dumps({"topic": topic.name, "group": q["group"],
                                                        "entries": entries}).encode()
        return 404, "text/plain", b"not found\n"


async def start_http(broker: Broker, host: str, port: int) -> asyncio.base_events.Server:
    endpoints = HttpEndpoints(broker)
    return await asyncio.start_server(endpoints.handle, host, port, limit=64 * 1024)
