"""The broker's admin API (docs/broker-admin-api.md): transaction back-checks and dead-letter re-drive.

Served under /admin/ by the broker's HTTP server (`broker_core.admin.http`), on its event loop. Every call
needs `Authorization: Bearer <token>` (the broker's admin token, from SWITCHYARD_BROKER_ADMIN_TOKEN or the
file SWITCHYARD_BROKER_ADMIN_TOKEN_FILE names; none configured: every call is refused with 403
`admin_disabled`). `broker_core.admin.http` checks it with `authorize` before it reads a request's body.
Input is checked completely before anything changes: bad input is a 400 and changes nothing. Answers
and errors are JSON; errors are {"error", "message"}.

    GET  /admin/tx/prepared   prepared messages (oldest first, paged)
    GET  /admin/tx/state      state of messages by id
    POST /admin/tx/check      ask the producing apps in-band (CheckTx), wait for their answers
    POST /admin/tx/resolve    commit or roll back (durable before the answer; idempotent)
    GET  /admin/dlq           dead letters of a group not re-driven yet (by time range, paged)
    POST /admin/dlq/redrive   deliver listed dead letters to their group again, once

and those a migration between clusters needs (`broker_core.admin.migration`): /admin/drain,
/admin/dlq/export, /admin/dlq/import.
"""

from __future__ import annotations

import asyncio
import hmac
import time

from broker_core import protocol as p
from broker_core.admin.common import (
    MAX_IDS,
    STORE_WAIT_S,
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
from broker_core.admin.migration import MAX_IMPORT_BODY, MigrationAdmin, dead_letter_row

MAX_BODY = 1024 * 1024
BODY_LIMITS = {"/admin/dlq/import": MAX_IMPORT_BODY}  # paths that take more than MAX_BODY
MAX_PAGE = 10_000
DEFAULT_CHECK_TIMEOUT_MS = 3000
MAX_CHECK_TIMEOUT_MS = 10_000
MAX_REASON = 64


def authorize(expected: str, authorization: str) -> Answer | None:
    """None when the Authorization header carries the broker's token (compared in constant time), else the
    refusal: 403 when the broker has no token (every protected call refuses), 401 otherwise."""
    if not expected:
        return error(403, "admin_disabled", "this broker has no admin token, so it refuses every call but "
                                             "/healthz and /metrics: start it with SWITCHYARD_BROKER_ADMIN_TOKEN "
                                             "or SWITCHYARD_BROKER_ADMIN_TOKEN_FILE in its environment")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), expected.encode()):
        return error(401, "unauthorized", "send the broker's admin token as 'Authorization: Bearer <token>'")
    return None


class Admin:
    def __init__(self, broker: NodeView):
        self.broker = broker
        self.routes = {
            ("GET", "/admin/tx/prepared"): self.tx_prepared,
            ("GET", "/admin/tx/state"): self.tx_state,
            ("POST", "/admin/tx/check"): self.tx_check,
            ("POST", "/admin/tx/resolve"): self.tx_resolve,
            ("GET", "/admin/dlq"): self.dlq_list,
            ("POST", "/admin/dlq/redrive"): self.dlq_redrive,
            **MigrationAdmin(broker).routes,
        }

    # -- entry point --------------------------------------------------------------------------

    async def handle(self, method: str, path: str, query: dict[str, str], body: object) -> Answer:
        """An authorized call (`authorize` passed). `body`: the parsed JSON of a POST (a BadRequest when it did
        not parse)."""
        handler = self.routes.get((method, path))
        if handler is None:
            if any(route_path == path for _, route_path in self.routes):
                return error(405, "method_not_allowed", f"{path} does not accept {method}")
            return error(404, "not_found", f"no admin endpoint {path}")
        try:
            if isinstance(body, BadRequest):
                raise body
            if method == "POST" and not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            return await handler(query, body) if method == "POST" else await handler(query)
        except BadRequest as exc:
            return error(exc.status, exc.code, str(exc))

    # -- transactions ---------------------------------------------------------------------------

    async def tx_prepared(self, q: dict[str, str]) -> Answer:
        older_than_ms = int_param(q, "older_than_ms", 0, 0, None)
        limit = int_param(q, "limit", 1000, 1, MAX_PAGE)
        topic = q.get("topic") or None
        after = cursor_param(q.get("after"))
        now_ms = int(time.time() * 1000)
        tx = self.broker.tx
        listening = set(tx.listeners())
        rows = [(e.prepared_ms, e.message.id, t, e) for t, e in tx.prepared()
                if (topic is None or t.name == topic) and now_ms - e.prepared_ms >= older_than_ms
                and (after is None or (e.prepared_ms, e.message.id) > after)]
        rows.sort(key=lambda r: (r[0], r[1]))
        page = rows[:limit]
        prepared = [{"message_id": m.id, "topic": t.name, "app_id": m.app_id, "message_type": m.message_type,
                     "key": m.key, "business_id": m.business_id, "prepared_at_ms": ms,
                     "producer_connected": m.app_id in listening}
                    for ms, _, t, e in page for m in (e.message,)]
        next_after = f"{page[-1][0]}:{page[-1][1]}" if len(rows) > limit else None
        return 200, {"node_id": self.broker.node_id, "now_ms": now_ms, "prepared": prepared, "next_after": next_after}

    async def tx_state(self, q: dict[str, str]) -> Answer:
        ids = [i for i in (q.get("ids") or "").split(",") if i]
        if not ids:
            raise BadRequest("give ids=<comma-separated message ids>")
        if len(ids) > MAX_IDS:
            raise BadRequest(f"at most {MAX_IDS} ids per call")
        states = {}
        for message_id in ids:
            found = self.broker.tx.find(message_id)
            states[message_id] = found[1].state if found else p.TX_UNKNOWN
        return 200, {"states": states}

    async def tx_check(self, q: dict[str, str], body: dict) -> Answer:
        ids = id_list(body, "message_ids")
        timeout_ms = body.get("timeout_ms", DEFAULT_CHECK_TIMEOUT_MS)
        if type(timeout_ms) is not int or not 0 < timeout_ms <= MAX_CHECK_TIMEOUT_MS:
            raise BadRequest(f"timeout_ms must be an integer from 1 to {MAX_CHECK_TIMEOUT_MS}")
        return 200, {"results": await self.broker.tx.check(ids, timeout_ms / 1000)}

    async def tx_resolve(self, q: dict[str, str], body: dict) -> Answer:
        decisions = body.get("decisions")
        if not isinstance(decisions, list) or not decisions or len(decisions) > MAX_IDS:
            raise BadRequest(f"decisions must be a list of 1 to {MAX_IDS} objects")
        checked = []
        for i, d in enumerate(decisions):
            if not isinstance(d, dict):
                raise BadRequest(f"decisions[{i}] must be an object")
            message_id, decision, reason = d.get("message_id"), d.get("decision"), d.get("reason", "manual")
            if not isinstance(message_id, str) or not 0 < len(message_id) <= 64:
                raise BadRequest(f"decisions[{i}].message_id must be a message id")
            if decision not in (p.TX_COMMIT, p.TX_ROLLBACK):
                raise BadRequest(f"decisions[{i}].decision must be 'commit' or 'rollback'")
            if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON:
                raise BadRequest(f"decisions[{i}].reason must be a short text (1 to {MAX_REASON} characters)")
            checked.append((message_id, decision == p.TX_COMMIT, reason))
        tx = self.broker.tx
        results, waits = [], []
        for message_id, commit, reason in checked:
            result = {"message_id": message_id, "state": None, "changed": False, "error": None}
            results.append(result)
            found = tx.find(message_id)
            if found is None:
                result["error"] = "unknown_message"
                continue
            topic, entry = found
            wanted = p.TX_COMMITTED if commit else p.TX_ROLLED_BACK
            if entry.state == p.TX_PREPARED:
                waits.append(tx.end(topic, entry, commit, reason))
                result["changed"] = True
            elif entry.state != wanted:
                result["error"] = "already_resolved"
            result["state"] = entry.state
        if waits:
            done, _ = await asyncio.wait(waits, timeout=STORE_WAIT_S)
            failures = [f.result() for f in done if f.result() is not None]
            if len(done) < len(waits) or failures:
                return error(500, "store_failed", f"the broker could not make the decisions durable: "
                                                   f"{failures[0] if failures else 'timed out'}")
        return 200, {"results": results}

    # -- dead letters ---------------------------------------------------------------------------

    def _group_store(self, topic: str, group: str):
        t = self.broker.topics.get(topic)
        return t, (t.store if t is not None else None)

    async def dlq_list(self, q: dict[str, str]) -> Answer:
        topic, group = topic_and_group(q)
        since_ms = int_param(q, "since_ms", None, 0, None)
        until_ms = int_param(q, "until_ms", None, 0, None)
        limit = int_param(q, "limit", 1000, 1, MAX_PAGE)
        after = cursor_param(q.get("after"))
        t, store = self._group_store(topic, group)
        rows = store.dead_index.page(group, since_ms, until_ms, after, limit + 1) if store is not None else []
        page = rows[:limit]
        entries = [dead_letter_row(topic, group, d) for d in page]
        next_after = f"{page[-1].dead_ms}:{page[-1].fields[p.M_ID]}" if len(rows) > limit else None
        return 200, {"dead_letters": entries, "next_after": next_after}

    async def dlq_redrive(self, q: dict[str, str], body: dict) -> Answer:
        topic, group = topic_and_group(body)
        ids = list(dict.fromkeys(id_list(body, "message_ids")))
        t, store = self._group_store(topic, group)
        if store is None:
            return 200, {"redriven": [], "skipped": [{"message_id": i, "reason": "not_dead_lettered"} for i in ids]}
        index = store.dead_index
        found = index.by_message_id(group, ids)
        redriven_before = index.redriven_ids(group)
        skipped, chosen, superseded = [], [], []
        for message_id in ids:
            dead = found.get(message_id)
            if not dead:
                reason = "already_redriven" if message_id in redriven_before else "not_dead_lettered"
                skipped.append({"message_id": message_id, "reason": reason})
                continue
            chosen.append(max(dead, key=lambda d: d.seq))  # the latest copy (a crash can leave two)
            superseded += [d for d in dead if d is not chosen[-1]]  # retired with it, not re-driven
        with_bodies = store.dead_letter_bodies(group, chosen) if chosen else []
        missing = {d.seq for d in chosen} - {d.seq for d in with_bodies}
        skipped += [{"message_id": d.fields[p.M_ID], "reason": "not_dead_lettered"} for d in chosen
                    if d.seq in missing]
        if not with_bodies:
            return 200, {"redriven": [], "skipped": skipped}
        exc = await durable(lambda done: t.redrive(group, with_bodies, done, superseded))
        if exc is not None:
            return error(500, "store_failed", f"the broker could not store the re-drive: {exc}")
        return 200, {"redriven": [d.fields[p.M_ID] for d in with_bodies], "skipped": skipped}
