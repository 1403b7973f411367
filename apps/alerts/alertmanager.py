"""Alertmanager's API v2, as the control plane uses it: firing alerts, silences (create, read, expire)."""

from __future__ import annotations

import json

import httpx
from django.conf import settings

from control_plane.errors import ActionError

TIMEOUT = 5


class AlertmanagerUnreachable(ActionError):
    pass


def _call(method: str, path: str, body: dict | None = None):
    url = f"{settings.SWITCHYARD_ALERTMANAGER_URL}/api/v2{path}"
    try:
        with httpx.Client(timeout=TIMEOUT, follow_redirects=False, trust_env=False) as client:
            response = client.request(method, url, json=body)
    except httpx.HTTPError as exc:
        raise AlertmanagerUnreachable(f"Alertmanager at {settings.SWITCHYARD_ALERTMANAGER_URL} did not answer: "
                                      f"{exc}") from None
    if response.status_code == 404:
        raise ActionError(f"Alertmanager has no such thing ({path})", field="silence_id")
    if response.status_code >= 300:
        detail = response.content[:500].decode(errors="replace")
        raise AlertmanagerUnreachable(f"Alertmanager answered {response.status_code}: {detail}")
    return json.loads(response.content) if response.content else None


def alerts(active_only: bool = True) -> list[dict]:
    """The alerts Alertmanager holds now (active: neither silenced nor inhibited), newest first."""
    query = "?active=true&silenced=false&inhibited=false" if active_only else ""
    found = _call("GET", f"/alerts{query}") or []
    return sorted(found, key=lambda a: a.get("startsAt", ""), reverse=True)


def silences() -> list[dict]:
    return _call("GET", "/silences") or []


def get_silence(silence_id: str) -> dict:
    return _call("GET", f"/silence/{silence_id}") or {}


def create_silence(body: dict) -> str:
    return _call("POST", "/silences", body)["silenceID"]


def expire_silence(silence_id: str) -> None:
    _call("DELETE", f"/silence/{silence_id}")
