"""Helpers of the transaction, re-drive and lifecycle tests: the broker admin API over real HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

TOKEN = "test-admin-token"


def admin(broker, method: str, path: str, body=None, token: str | None = TOKEN, raw: bytes | None = None,
          timeout: float = 20) -> tuple[int, dict]:
    """Call the broker's admin API; returns (status, JSON answer) whatever the status."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(f"http://127.0.0.1:{broker.metrics_port}{path}", data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def states(broker, ids) -> dict[str, str]:
    status, answer = admin(broker, "GET", "/admin/tx/state?ids=" + ",".join(ids))
    assert status == 200, answer
    return answer["states"]


def resolve(broker, decisions: list[tuple[str, str]], reason: str = "manual") -> list[dict]:
    status, answer = admin(broker, "POST", "/admin/tx/resolve",
                           {"decisions": [{"message_id": m, "decision": d, "reason": reason} for m, d in decisions]})
    assert status == 200, answer
    return answer["results"]


def drain(broker, topic: str) -> dict:
    """GET /admin/drain of a topic (with the broker's own admin token)."""
    status, answer = admin(broker, "GET", f"/admin/drain?topic={topic}", token=broker.admin_token)
    assert status == 200, answer
    return answer
