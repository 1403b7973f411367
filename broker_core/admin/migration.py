"""Admin endpoints a topic's migration between clusters needs (docs/broker-admin-api.md "Migration").

    GET  /admin/drain?topic=T        what this broker still holds of a topic: backlog per group, in flight,
                                     unresolved transaction messages, dead letters
    GET  /admin/dlq/export           a group's dead letters with their whole messages (paged)
    POST /admin/dlq/import           store dead letters exported elsewhere as a group's own (idempotent by id)

Served by `broker_core.admin.api.Admin` (same token, same errors), on the broker's event loop.
"""

from __future__ import annotations

import base64
import binascii

from broker_core import protocol as p
from broker_core.admin.common import (
    MAX_IDS,
    Answer,
    BadRequest,
    NodeView,
    cursor_param,
    durable,
    error,
    int_param,
    topic_and_group,
)
from broker_core.storage.store import DeadLetter

EXPORT_PAGE = 100  # default page of an export
EXPORT_BODY_BYTES = 4 * 1024 * 1024  # message bodies in one export answer (at least one dead letter)
MAX_IMPORT_BODY = 8 * 1024 * 1024  # an import request (one page of an export, bodies in base64)
MAX_CAUSE = 200


def dead_letter_row(topic: str, group: str, d: DeadLetter) -> dict:
    """A dead letter as `GET /admin/dlq` lists it."""
    f = d.fields
    return {"message_id": f[p.M_ID], "topic": topic, "group": group, "message_type": f[p.M_TYPE], "key": f[p.M_KEY],
            "business_id": f[p.M_BUSINESS_ID], "cause": d.cause, "attempts": d.attempts, "dead_ms": d.dead_ms,
            "app_id": d.app_id}


def export_row(topic: str, group: str, d: DeadLetter) -> dict:
    """A dead letter with its whole message, as `/admin/dlq/export` gives it and `/admin/dlq/import` takes it."""
    f = d.fields
    return {**dead_letter_row(topic, group, d), "received_ms": d.received_ms, "headers": f[p.M_HEADERS],
            "body": base64.b64encode(f[p.M_BODY]).decode("ascii"), "ttl_ms": f[p.M_TTL_MS],
            "delivery_limit": f[p.M_DELIVERY_LIMIT], "flags": f[p.M_FLAGS], "timestamp_ms": f[p.M_TIMESTAMP_MS]}


class MigrationAdmin:
    def __init__(self, broker: NodeView):
        self.broker = broker
        self.routes = {
            ("GET", "/admin/drain"): self.drain,
            ("GET", "/admin/dlq/export"): self.dlq_export,
            ("POST", "/admin/dlq/import"): self.dlq_import,
        }

    async def drain(self, q: dict[str, str]) -> Answer:
        name = q.get("topic")
        if not name:
            raise BadRequest("topic is required")
        state = self.broker.state
        config = state.topics.get(name)
        topic = self.broker.topics.get(name)
        groups = {}
        for group in sorted((topic.known_groups() if topic else set()) | set(state.topic_bindings(name))):
            g = topic.groups.get(group) if topic else None
            in_flight = g.in_flight() if g else 0
            groups[group] = {"bound": state.binding(name, group) is not None,
                             "backlog": (g.depth() + in_flight) if g else 0, "in_flight": in_flight,
                             "dead_letters": topic.store.dead_letter_count(group) if topic else 0,
                             "consumers": len(g.subs) if g else 0}
        return 200, {"node_id": self.broker.node_id, "topic": name, "held": config is not None or topic is not None,
                     "retired": bool(config and config.retired), "revision": config.revision if config else None,
                     "grants": sorted(state.grants.get(name, ())), "messages": topic.store.held if topic else 0,
                     "prepared": len(topic.store.prepared) if topic else 0, "groups": groups}

    async def dlq_export(self, q: dict[str, str]) -> Answer:
        topic, group = topic_and_group(q)
        limit = int_param(q, "limit", EXPORT_PAGE, 1, MAX_IDS)
        after = cursor_param(q.get("after"))
        t = self.broker.topics.get(topic)
        if t is None:
            return 200, {"dead_letters": [], "next_after": None}
        rows = t.store.dead_index.page(group, None, None, after, limit + 1)
        page = rows[:limit]
        bodies = {d.seq: d for d in t.store.dead_letter_bodies(group, page)} if page else {}
        out, size, last, cut = [], 0, None, False
        for d in page:
            whole = bodies.get(d.seq)
            if whole is not None:  # (else re-driven meanwhile)
                size += len(whole.fields[p.M_BODY])
                if out and size > EXPORT_BODY_BYTES:
                    cut = True  # the answer is bounded in bytes too: the rest comes with the next page
                    break
                out.append(export_row(topic, group, whole))
            last = d
        more = (cut or len(rows) > limit) and last is not None
        next_after = f"{last.dead_ms}:{last.fields[p.M_ID]}" if more else None
        return 200, {"dead_letters": out, "next_after": next_after}

    async def dlq_import(self, q: dict[str, str], body: dict) -> Answer:
        topic, group = topic_and_group(body)
        entries = body.get("dead_letters")
        if not isinstance(entries, list) or not entries or len(entries) > MAX_IDS:
            raise BadRequest(f"dead_letters must be a list of 1 to {MAX_IDS} dead letters, as /admin/dlq/export "
                             "gives them")
        dead = [_imported(i, e) for i, e in enumerate(entries)]
        state = self.broker.state
        if topic not in state.topics or state.binding(topic, group) is None:
            raise BadRequest(f"topic {topic!r} or its binding of group {group!r} is not provisioned in this broker's "
                             "cluster: provision them here first, then import", code="not_provisioned", status=409)
        store = self.broker.topic(topic).store
        index = store.dead_index
        present = {d.fields[p.M_ID] for d in index.live.get(group, {}).values()}
        redriven, deleted = index.redriven_ids(group), index.deleted_ids(group)
        chosen, skipped, seen = [], [], set()
        for d in dead:
            message_id = d.fields[p.M_ID]
            reason = "duplicate" if message_id in seen else "already_dead_lettered" if message_id in present else \
                "already_redriven" if message_id in redriven else "already_deleted" if message_id in deleted else None
            seen.add(message_id)
            if reason is None:
                chosen.append(d)
            else:
                skipped.append({"message_id": message_id, "reason": reason})
        if chosen:
            exc = await durable(lambda done: store.import_dead_letters(group, chosen, done))
            if exc is not None:
                return error(500, "store_failed", f"the broker could not store the dead letters: {exc}")
        return 200, {"imported": [d.fields[p.M_ID] for d in chosen], "skipped": skipped}


def _imported(i: int, e: object) -> DeadLetter:
    """One entry of an import, checked, as a dead letter (its seq is given by the store)."""
    if not isinstance(e, dict):
        raise BadRequest(f"dead_letters[{i}] must be an object")

    def field(name: str, kinds: tuple, default=None, required: bool = False):
        if name not in e:
            if required:
                raise BadRequest(f"dead_letters[{i}].{name} is required")
            return default
        value = e[name]
        if not isinstance(value, kinds) or isinstance(value, bool) or (isinstance(value, int) and value < 0):
            raise BadRequest(f"dead_letters[{i}].{name} has the wrong type or a negative value")
        return value

    try:
        body = base64.b64decode(field("body", (str,), required=True), validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"dead_letters[{i}].body must be base64") from None
    headers = field("headers", (dict,), {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise BadRequest(f"dead_letters[{i}].headers must map strings to strings")
    cause = field("cause", (str,), "imported")
    if len(cause) > MAX_CAUSE:
        raise BadRequest(f"dead_letters[{i}].cause is longer than {MAX_CAUSE} characters")
    fields = p.message(field("message_id", (str,), required=True), field("message_type", (str,), ""), body,
                       key=field("key", (str, type(None))), business_id=field("business_id", (str, type(None))),
                       headers=headers, ttl_ms=field("ttl_ms", (int,), 0),
                       delivery_limit=field("delivery_limit", (int,), 0), flags=field("flags", (int,), 0),
                       timestamp_ms=field("timestamp_ms", (int,), 0))
    try:
        p.check_message(fields)
    except p.ProtocolError:
        raise BadRequest(f"dead_letters[{i}] is not a valid message (message_id: 1 to 64 characters, "
                         "message_type: at most 255)") from None
    return DeadLetter(0, "", cause, field("attempts", (int,), 0), field("dead_ms", (int,), required=True),
                      field("app_id", (str, type(None))), field("received_ms", (int,), required=True), fields)
