"""The broker's HTTP side: GET /metrics (Prometheus), /stats (JSON), /deadletters, /healthz, and the
admin API under /admin/ (`broker_core.admin.api`, docs/broker-admin-api.md).

Who may call: anyone reaching the port may read `/healthz` and `/metrics` (figures, no message data);
every other path (`/stats`, `/deadletters`, `/admin/...`, and unknown paths) needs
`Authorization: Bearer <admin token>`. The token is checked (in constant time) from the request's head,
before a byte of its body is read: a refused request is answered 401 (no or wrong token) or 403 (this
broker has no token: all of them refuse, fail closed) and the connection is closed with its body unread
(what the client still sends is discarded for a moment, never parsed, so it reads the answer instead of a
reset). Bodies are limited to `admin.MAX_BODY` (413; `admin.BODY_LIMITS` raises it for a path); at most `max_http_connections` requests are served
at once (503 beyond).

It runs on the broker's event loop, so it reads the live objects without locks; figures are
computed at request time from the counters the topics and groups keep (no per-message metric
calls on the hot path). The /stats shape is documented in `Broker.stats`.

    GET /deadletters?topic=T&group=G&limit=N   the group's dead letters, oldest first (JSON;
                                               bodies as UTF-8 text when they decode, else base64;
                                               at most 8 MiB of bodies, then "truncated": true)
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from broker_core.admin.api import BODY_LIMITS, MAX_BODY, Admin, authorize
from broker_core.admin.common import BadRequest, NodeView

log = logging.getLogger("broker_core.http")

GROUP_GAUGES = {
    "depth": "Messages waiting in the group (ready or in backoff)",
    "in_flight": "Messages delivered and not yet acked",
    "consumers": "Subscriptions connected to the group on this broker",
    "dead_letter_queue": "Entries in the group's dead-letter queue",
    "oldest_age_seconds": "Seconds since the oldest message the group still owes was received (0: none)",
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
    def __init__(self, broker: NodeView):
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
        if stats.get("trace") is not None:  # (tracing on)
            dropped = CounterMetricFamily("switchyard_broker_trace_events_dropped", "Trace events dropped because "
                                          "the trace process was too far behind", labels=base)
            dropped.add_metric(list(labels.values()), stats["trace"]["dropped"])
            yield dropped
        published = CounterMetricFamily("switchyard_topic_published", "Messages made visible to groups: stored, "
                                        "or committed (transactions)", labels=[*base, "topic"])
        pub_bytes = CounterMetricFamily("switchyard_topic_published_bytes", "Bytes stored", labels=[*base, "topic"])
        scheduled = GaugeMetricFamily("switchyard_topic_scheduled", "Delayed messages scheduled, not due yet",
                                      labels=[*base, "topic"])
        gauges = {k: GaugeMetricFamily(f"switchyard_group_{k}", h, labels=[*base, "topic", "group"])
                  for k, h in GROUP_GAUGES.items()}
        counters = {k: CounterMetricFamily(f"switchyard_group_{k}", h, labels=[*base, "topic", "group"])
                    for k, h in GROUP_COUNTERS.items()}
        for topic, t in stats["topics"].items():
            values = [*labels.values(), topic]
            published.add_metric(values, t["published"])
            pub_bytes.add_metric(values, t["published_bytes"])
            scheduled.add_metric(values, t.get("scheduled", 0))
            for group, g in t["groups"].items():
                for k, family in gauges.items():
                    family.add_metric([*values, group], g[k])
                for k, family in counters.items():
                    family.add_metric([*values, group], g[k])
        yield published
        yield pub_bytes
        yield scheduled
        yield from gauges.values()
        yield from counters.values()


def _json_safe_entry(entry: dict) -> dict:
    body = entry.get("body", b"")
    try:
        entry["body"], entry["body_encoding"] = body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        entry["body"], entry["body_encoding"] = base64.b64encode(body).decode("ascii"), "base64"
    return entry


PUBLIC_PATHS = frozenset({"/healthz", "/metrics"})
HEAD_LIMIT = 16 * 1024  # request line and headers
DEADLETTERS_ANSWER_BYTES = 8 * 1024 * 1024  # bodies in one /deadletters answer (at least one entry)
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 411: "Length Required", 413: "Payload Too Large", 500: "Error",
           503: "Service Unavailable"}


class Refused(Exception):
    """A request answered without reading its body; the connection closes after the answer."""

    def __init__(self, status: int, answer: dict, extra_headers: str = ""):
        super().__init__(answer.get("message", ""))
        self.status = status
        self.answer = answer
        self.extra_headers = extra_headers


async def _lingering_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           limit: int = 4 * 1024 * 1024, seconds: float = 1.0) -> None:
    """After refusing a body unread: half-close and discard what the client still sends (bounded in bytes
    and time, never kept nor parsed), so it reads the answer instead of a connection reset (closing with
    unread input sends RST)."""
    if writer.can_write_eof():
        writer.write_eof()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    discarded = 0
    while discarded < limit:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        chunk = await asyncio.wait_for(reader.read(65536), timeout=remaining)
        if not chunk:
            return
        discarded += len(chunk)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("bad request line")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
    return parts[0], parts[1], headers


def _content_length(headers: dict[str, str], limit: int) -> int:
    if "transfer-encoding" in headers:
        raise Refused(411, {"error": "length_required",
                            "message": "send the body with a Content-Length (chunked bodies are not accepted)"})
    raw = headers.get("content-length", "0")
    if not raw.isdigit():
        raise Refused(400, {"error": "invalid", "message": "Content-Length must be a number of bytes"})
    length = int(raw)
    if length > limit:
        raise Refused(413, {"error": "too_large", "message": f"request bodies here are limited to {limit} bytes"})
    return length


class HttpEndpoints:
    def __init__(self, broker: NodeView, admin_token: str, max_connections: int):
        self.broker = broker
        self.admin_token = admin_token
        self.max_connections = max_connections
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker))
        self.admin = Admin(broker)
        self.active = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.active >= self.max_connections:
            self._answer(writer, 503, "application/json", json.dumps(
                {"error": "busy", "message": "too many HTTP requests at once on this broker; retry shortly"}).encode())
            writer.close()
            return
        self.active += 1
        try:
            await self._serve(reader, writer)
        finally:
            self.active -= 1
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        linger = False
        extra = ""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            method, target, headers = _parse_head(head)
            url = urlsplit(target)
            if url.path not in PUBLIC_PATHS:
                refusal = authorize(self.admin_token, headers.get("authorization", ""))
                if refusal is not None:
                    raise Refused(*refusal, extra_headers='WWW-Authenticate: Bearer realm="switchyard-broker"\r\n')
            length = _content_length(headers, BODY_LIMITS.get(url.path, MAX_BODY))
            raw = await asyncio.wait_for(reader.readexactly(length), timeout=10) if length else b""
            if url.path.startswith("/admin/"):
                status, ctype, body = await self.route_admin(method, url, headers, raw)
            else:
                status, ctype, body = self.route(method, url)
        except Refused as refused:
            status, ctype, body = refused.status, "application/json", json.dumps(refused.answer).encode()
            extra, linger = refused.extra_headers, True
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            status, ctype, body = 400, "text/plain", b"bad request\n"
        except Exception:
            log.exception("http request failed")
            status, ctype, body = 500, "text/plain", b"internal error\n"
        self._answer(writer, status, ctype, body, extra)
        try:
            await asyncio.wait_for(writer.drain(), timeout=5)
            if linger:
                await _lingering_close(reader, writer)
        except (TimeoutError, ConnectionError):
            pass

    @staticmethod
    def _answer(writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes, extra: str = "") -> None:
        writer.write(f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n{extra}"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)

    async def route_admin(self, method: str, url, headers: dict[str, str], raw: bytes) -> tuple[int, str, bytes]:
        """Hand an (authorized) request with its JSON body to `Admin` and encode its answer."""
        body: object = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = BadRequest("the request body is not valid JSON")
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        status, answer = await self.admin.handle(method, url.path, query, body)
        return status, "application/json", json.dumps(answer).encode()

    def route(self, method: str, url) -> tuple[int, str, bytes]:
        if method != "GET":
            return 405, "text/plain", b"GET only\n"
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
            entries, size, truncated = [], 0, False
            for dead in topic.store.dead_letters(q["group"], limit):
                entry = dead.to_dict()
                size += len(entry["body"]) + 256
                if entries and size > DEADLETTERS_ANSWER_BYTES:
                    truncated = True  # the answer is bounded in bytes too; page with /admin/dlq
                    break
                entries.append(_json_safe_entry(entry))
            return 200, "application/json", json.dumps({"topic": topic.name, "group": q["group"],
                                                        "entries": entries, "truncated": truncated}).encode()
        return 404, "text/plain", b"not found\n"


async def start_http(broker: NodeView, host: str, port: int, admin_token: str,
                     max_connections: int) -> asyncio.base_events.Server:
    """`admin_token` guards everything but PUBLIC_PATHS (empty: refused); `max_connections` requests at once."""
    endpoints = HttpEndpoints(broker, admin_token, max_connections)
    return await asyncio.start_server(endpoints.handle, host, port, limit=HEAD_LIMIT)
