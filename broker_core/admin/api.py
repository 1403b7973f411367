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

the dead-letter endpoints (`broker_core.admin.dead_letters`: /admin/dlq listing, re-drive, delete, copy, and
/admin/group/reset), and those a migration between clusters needs (`broker_core.admin.migration`): /admin/drain,
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
    error,
    id_list,
    int_param,
)
from broker_core.admin.dead_letters import DeadLetterAdmin
from broker_core.admin.migration import MAX_IMPORT_BODY, MigrationAdmin

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
            **DeadLetterAdmin(broker).routes,
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
