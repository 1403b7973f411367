"""A client of one broker's admin HTTP API (docs/transactions.md, the broker's /admin/ endpoints).

httpx, no redirects. Every call is bounded by SWITCHYARD_BROKER_ADMIN_TIMEOUT and carries the bearer token
SWITCHYARD_BROKER_ADMIN_TOKEN. One keep-alive connection pool per client object (one client per task and broker).
Brokers are found in the cluster's ZooKeeper: /brokers/<node> holds host and metrics_port.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
from django.conf import settings

from apps.clusters.zookeeper import ZooKeeperUnreachable, read_health


class BrokerAdminError(Exception):
    """The broker did not answer, or answered with an error (status and code kept)."""

    def __init__(self, message: str, status: int | None = None, code: str = ""):
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: str
    host: str
    metrics_port: int


def live_brokers(cluster) -> list[BrokerEndpoint]:
    """The brokers registered in the cluster's ZooKeeper now (raises ZooKeeperUnreachable)."""
    health = read_health(cluster)
    if not health.reachable:
        raise ZooKeeperUnreachable(health.error)
    return [BrokerEndpoint(b.node_id, b.host, int(b.metrics_port)) for b in health.brokers if b.metrics_port]


def admin_headers(token: str | None = None) -> dict[str, str]:
    """The headers of every admin call: JSON, and the brokers' bearer token (the settings' unless given)."""
    token = settings.SWITCHYARD_BROKER_ADMIN_TOKEN if token is None else token
    return {"Accept": "application/json", "Authorization": f"Bearer {token}"}


def admin_timeout() -> float:
    return settings.SWITCHYARD_BROKER_ADMIN_TIMEOUT


def answer_error(where: str, status: int, raw: bytes) -> BrokerAdminError:
    """A broker's error answer (`{"error": code, "message": what to do}`) as a BrokerAdminError."""
    try:
        payload = json.loads(raw or b"{}")
    except ValueError:
        payload = {"error": "not_json", "message": raw[:200].decode(errors="replace")}
    code = payload.get("error", "") if isinstance(payload, dict) else ""
    message = payload.get("message", "") if isinstance(payload, dict) else ""
    return BrokerAdminError(f"{where}: {status} {code}: {message}", status, code)


class BrokerAdmin:
    """One broker's admin API (close it, or use `with`)."""

    def __init__(self, endpoint: BrokerEndpoint, token: str | None = None, timeout: float | None = None):
        self.endpoint = endpoint
        self.timeout = timeout or admin_timeout()
        self._http = httpx.Client(base_url=f"http://{endpoint.host}:{endpoint.metrics_port}",
                                  headers=admin_headers(token), timeout=self.timeout, follow_redirects=False,
                                  trust_env=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BrokerAdmin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the endpoints ------------------------------------------------------------------------

    def prepared(self, *, older_than_ms: int = 0, topic: str | None = None, limit: int = 1000,
                 after: str | None = None) -> dict:
        return self._call("GET", "/admin/tx/prepared", params={"older_than_ms": older_than_ms, "topic": topic,
                                                               "limit": limit, "after": after})

    def iter_prepared(self, *, older_than_ms: int = 0, page: int = 5000):
        """Every prepared message older than older_than_ms, page by page."""
        after = None
        while True:
            answer = self.prepared(older_than_ms=older_than_ms, limit=page, after=after)
            yield from answer.get("prepared", [])
            after = answer.get("next_after")
            if not after:
                return

    def states(self, message_ids: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for i in range(0, len(message_ids), 1000):
            answer = self._call("GET", "/admin/tx/state", params={"ids": ",".join(message_ids[i:i + 1000])})
            out.update(answer.get("states", {}))
        return out

    def check(self, message_ids: list[str], timeout_ms: int | None = None) -> list[dict]:
        timeout_ms = timeout_ms or settings.SWITCHYARD_TX_CHECK_TIMEOUT_MS
        results: list[dict] = []
        for i in range(0, len(message_ids), 1000):
            answer = self._call("POST", "/admin/tx/check",
                                body={"message_ids": message_ids[i:i + 1000], "timeout_ms": timeout_ms},
                                timeout=self.timeout + timeout_ms / 1000)
            results.extend(answer.get("results", []))
        return results

    def resolve(self, decisions: list[dict]) -> list[dict]:
        results: list[dict] = []
        for i in range(0, len(decisions), 1000):
            results.extend(self._call("POST", "/admin/tx/resolve", body={"decisions": decisions[i:i + 1000]})
                           .get("results", []))
        return results

    def dead_letters(self, *, topic: str, group: str, since_ms: int | None = None, until_ms: int | None = None,
                     limit: int = 1000, after: str | None = None, message_type: str | None = None,
                     key: str | None = None, business_id: str | None = None, preview_bytes: int = 0) -> dict:
        return self._call("GET", "/admin/dlq", params={
            "topic": topic, "group": group, "since_ms": since_ms, "until_ms": until_ms, "limit": limit, "after": after,
            "message_type": message_type, "key": key, "business_id": business_id,
            "preview_bytes": preview_bytes or None})

    def redrive(self, *, topic: str, group: str, message_ids: list[str]) -> dict:
        return self._call("POST", "/admin/dlq/redrive", body={"topic": topic, "group": group,
                                                               "message_ids": message_ids})

    def delete(self, *, topic: str, group: str, message_ids: list[str]) -> dict:
        return self._call("POST", "/admin/dlq/delete", body={"topic": topic, "group": group,
                                                              "message_ids": message_ids})

    def copy(self, *, topic: str, group: str, message_ids: list[str], to_topic: str) -> dict:
        return self._call("POST", "/admin/dlq/copy", body={"topic": topic, "group": group,
                                                            "message_ids": message_ids, "to_topic": to_topic})

    def reset_group(self, *, topic: str, group: str, before_ms: int) -> dict:
        return self._call("POST", "/admin/group/reset", body={"topic": topic, "group": group,
                                                               "before_ms": before_ms})

    # --- transport ----------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, params: dict | None = None, body: dict | None = None,
              timeout: float | None = None) -> dict:
        params = {k: v for k, v in (params or {}).items() if v is not None}
        timeout = timeout or self.timeout
        where = f"broker {self.endpoint.node_id} ({self.endpoint.host}:{self.endpoint.metrics_port}) {method} {path}"
        for attempt in (1, 2):  # a kept-alive connection the broker closed meanwhile is retried once, fresh
            try:
                response = self._http.request(method, path, params=params, json=body, timeout=timeout)
                break
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if attempt == 2:
                    raise BrokerAdminError(f"{where}: connection lost: {exc}") from exc
            except httpx.HTTPError as exc:
                raise BrokerAdminError(f"{where}: no answer within {timeout:g}s: {type(exc).__name__} {exc}") from exc
        if response.status_code != 200:
            raise answer_error(where, response.status_code, response.content)
        try:
            return response.json() if response.content else {}
        except ValueError as exc:
            raise answer_error(where, response.status_code, response.content) from exc
