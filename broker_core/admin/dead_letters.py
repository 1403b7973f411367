"""Dead-letter and group-position endpoints of the broker's admin API (docs/broker-admin-api.md "Dead letters").

    GET  /admin/dlq              a group's dead letters (filtered by time, message type, key, business id;
                                 cursor-paged; the count of all that match; capped previews on request)
    POST /admin/dlq/redrive      deliver listed dead letters to their group again, once
    POST /admin/dlq/delete       delete listed dead letters (durable: a restart does not bring them back)
    POST /admin/dlq/copy         publish copies of listed dead letters to another topic of the cluster
    POST /admin/group/reset      skip a group's backlog: what it owes that was stored before a time is finished

Served by `broker_core.admin.api.Admin` (same token, same errors), on the broker's event loop. Input is
checked completely before anything changes.
"""

from __future__ import annotations

import asyncio
import base64
import time

from broker_core import protocol as p
from broker_core.admin.common import (
    Answer,
    BadRequest,
    NodeView,
    cursor_param,
    durable,
    error,
    id_list,
    int_param,
    topic_and_group,
)
from broker_core.admin.migration import dead_letter_row
from broker_core.delivery.positions import skip_backlog
from broker_core.storage.store import DeadLetter, DeadLetterFilter

MAX_PAGE = 10_000
MAX_PREVIEW = 64 * 1024  # bytes of a body a listing shows at most (per dead letter)
MAX_FILTER = 255
FUTURE_SLACK_MS = 1000  # clocks of the control plane and the broker may differ a little


def _text_param(q: dict[str, str], name: str) -> str | None:
    value = q.get(name)
    if value is None or value == "":
        return None
    if len(value) > MAX_FILTER:
        raise BadRequest(f"{name} must be at most {MAX_FILTER} characters")
    return value


def _preview(d: DeadLetter, cap: int) -> dict:
    body = d.fields[p.M_BODY]
    return {"received_ms": d.received_ms, "headers": d.fields[p.M_HEADERS], "body_size": len(body),
            "body_preview": base64.b64encode(body[:cap]).decode("ascii"), "body_truncated": len(body) > cap}


class DeadLetterAdmin:
    def __init__(self, broker: NodeView):
        self.broker = broker
        self.routes = {
            ("GET", "/admin/dlq"): self.dlq_list,
            ("POST", "/admin/dlq/redrive"): self.dlq_redrive,
            ("POST", "/admin/dlq/delete"): self.dlq_delete,
            ("POST", "/admin/dlq/copy"): self.dlq_copy,
            ("POST", "/admin/group/reset"): self.group_reset,
        }

    def _store(self, topic: str):
        t = self.broker.topics.get(topic)
        return t, (t.store if t is not None else None)

    async def dlq_list(self, q: dict[str, str]) -> Answer:
        topic, group = topic_and_group(q)
        wanted = DeadLetterFilter(int_param(q, "since_ms", None, 0, None), int_param(q, "until_ms", None, 0, None),
                                  _text_param(q, "message_type"), _text_param(q, "key"), _text_param(q, "business_id"))
        limit = int_param(q, "limit", 1000, 1, MAX_PAGE)
        preview = int_param(q, "preview_bytes", 0, 0, MAX_PREVIEW)
        after = cursor_param(q.get("after"))
        t, store = self._store(topic)
        matching = store.dead_index.matching(group, wanted) if store is not None else []
        rows = [d for d in matching if after is None or (d.dead_ms, d.fields[p.M_ID]) > after][:limit + 1]
        page = rows[:limit]
        entries = [dead_letter_row(topic, group, d) for d in page]
        if preview and page:
            whole = {d.seq: d for d in store.dead_letter_bodies(group, page)}
            for entry, d in zip(entries, page, strict=True):
                if d.seq in whole:  # (else re-driven or deleted meanwhile)
                    entry.update(_preview(whole[d.seq], preview))
        next_after = f"{page[-1].dead_ms}:{page[-1].fields[p.M_ID]}" if len(rows) > limit else None
        return 200, {"node_id": self.broker.node_id, "dead_letters": entries, "next_after": next_after,
                     "total": len(matching)}

    def _chosen(self, store, group: str, ids: list[str]) -> tuple[list[DeadLetter], list[DeadLetter], list[dict]]:
        """The live dead letters of these ids (the latest copy of each), older copies of the same ids, and
        the ids skipped with why."""
        index = store.dead_index
        found = index.by_message_id(group, ids)
        redriven, deleted = index.redriven_ids(group), index.deleted_ids(group)
        skipped, chosen, superseded = [], [], []
        for message_id in ids:
            dead = found.get(message_id)
            if not dead:
                reason = "already_redriven" if message_id in redriven else \
                    "already_deleted" if message_id in deleted else "not_dead_lettered"
                skipped.append({"message_id": message_id, "reason": reason})
                continue
            chosen.append(max(dead, key=lambda d: d.seq))  # the latest copy (a crash can leave two)
            superseded += [d for d in dead if d is not chosen[-1]]
        return chosen, superseded, skipped

    def _with_bodies(self, store, group: str, chosen: list[DeadLetter], skipped: list[dict]) -> list[DeadLetter]:
        whole = store.dead_letter_bodies(group, chosen) if chosen else []
        missing = {d.seq for d in chosen} - {d.seq for d in whole}
        skipped += [{"message_id": d.fields[p.M_ID], "reason": "not_dead_lettered"} for d in chosen
                    if d.seq in missing]
        return whole

    async def dlq_redrive(self, q: dict[str, str], body: dict) -> Answer:
        topic, group = topic_and_group(body)
        ids = list(dict.fromkeys(id_list(body, "message_ids")))
        t, store = self._store(topic)
        if store is None:
            return 200, {"redriven": [], "skipped": [{"message_id": i, "reason": "not_dead_lettered"} for i in ids]}
        chosen, superseded, skipped = self._chosen(store, group, ids)
        with_bodies = self._with_bodies(store, group, chosen, skipped)
        if not with_bodies:
            return 200, {"redriven": [], "skipped": skipped}
        exc = await durable(lambda done: t.redrive(group, with_bodies, done, superseded))
        if exc is not None:
            return error(500, "store_failed", f"the broker could not store the re-drive: {exc}")
        return 200, {"redriven": [d.fields[p.M_ID] for d in with_bodies], "skipped": skipped}

    async def dlq_delete(self, q: dict[str, str], body: dict) -> Answer:
        topic, group = topic_and_group(body)
        ids = list(dict.fromkeys(id_list(body, "message_ids")))
        t, store = self._store(topic)
        if store is None:
            return 200, {"deleted": [], "skipped": [{"message_id": i, "reason": "not_dead_lettered"} for i in ids]}
        chosen, superseded, skipped = self._chosen(store, group, ids)
        gone = chosen + superseded
        if not gone:
            return 200, {"deleted": [], "skipped": skipped}
        exc = await durable(lambda done: store.delete_dead_letters(group, gone, done))
        if exc is not None:
            return error(500, "store_failed", f"the broker could not store the delete: {exc}")
        return 200, {"deleted": [d.fields[p.M_ID] for d in chosen], "skipped": skipped}

    async def dlq_copy(self, q: dict[str, str], body: dict) -> Answer:
        topic, group = topic_and_group(body)
        ids = list(dict.fromkeys(id_list(body, "message_ids")))
        to_topic = body.get("to_topic")
        if not isinstance(to_topic, str) or not to_topic:
            raise BadRequest("to_topic (the topic to copy the dead letters to) is required")
        if to_topic == topic:
            raise BadRequest("to_topic must be another topic: to deliver a dead letter again, re-drive it")
        config = self.broker.state.topics.get(to_topic)
        if config is None or config.retired:
            raise BadRequest(f"topic {to_topic!r} is not an active topic of this broker's cluster", code="unknown_topic",
                             status=404)
        t, store = self._store(topic)
        if store is None:
            return 200, {"copied": [], "skipped": [{"message_id": i, "reason": "not_dead_lettered"} for i in ids]}
        chosen, _, skipped = self._chosen(store, group, ids)
        copies: dict[str | None, list[list]] = {}
        for d in self._with_bodies(store, group, chosen, skipped):
            fields = list(d.fields)
            if config.message_types and fields[p.M_TYPE] not in config.message_types:
                skipped.append({"message_id": fields[p.M_ID], "reason": "type_not_declared"})
                continue
            if config.max_message_bytes and len(fields[p.M_BODY]) > config.max_message_bytes:
                skipped.append({"message_id": fields[p.M_ID], "reason": "too_large"})
                continue
            fields[p.M_FLAGS] &= ~p.FLAG_PREPARED  # a copy is a plain message
            copies.setdefault(d.app_id, []).append(fields)
        target = self.broker.topic(to_topic)
        copied: list[str] = []
        for app_id, arrays in copies.items():
            exc = await durable(_publishing(target, app_id or "", arrays))
            if exc is not None:
                return error(500, "store_failed", f"the broker could not store the copies in {to_topic}: {exc} "
                                                  f"(copied before the failure: {len(copied)})")
            copied += [f[p.M_ID] for f in arrays]
        return 200, {"copied": copied, "skipped": skipped}

    async def group_reset(self, q: dict[str, str], body: dict) -> Answer:
        topic, group = topic_and_group(body)
        now_ms = int(time.time() * 1000)
        before_ms = body.get("before_ms", now_ms)
        if type(before_ms) is not int or before_ms < 0:
            raise BadRequest("before_ms must be a time in milliseconds since the epoch (absent: now)")
        if before_ms > now_ms + FUTURE_SLACK_MS:
            raise BadRequest(f"before_ms {before_ms} is in the future (now: {now_ms}): a group can skip only what "
                             "was stored already", code="in_future")
        if self.broker.state.binding(topic, group) is None:
            raise BadRequest(f"group {group!r} is not bound to topic {topic!r} in this broker's cluster",
                             code="unknown_group", status=404)
        t = self.broker.topics.get(topic)
        skipped = 0
        if t is not None:
            counted = asyncio.get_running_loop().create_future()
            skip_backlog(t.group(group), before_ms, f"position reset to {before_ms}: skipped", counted.set_result)
            skipped = await counted
        if t is not None:
            exc = await durable(t.store.sync_finishes)
            if exc is not None:
                return error(500, "store_failed", f"the broker could not make the reset durable: {exc}")
        return 200, {"node_id": self.broker.node_id, "topic": topic, "group": group, "before_ms": before_ms,
                     "skipped": skipped}


def _publishing(target, app_id: str, arrays: list[list]):
    """A store write for `durable`: publish the arrays to the target topic as `app_id` did."""
    size = sum(len(f[p.M_BODY]) for f in arrays)
    return lambda done: target.publish(app_id, "admin", arrays, size, lambda exc, _seq, _count: done(exc))
