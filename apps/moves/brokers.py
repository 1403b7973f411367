"""What a move asks a cluster's brokers (docs/broker-admin-api.md): how much of a topic each still holds
(`GET /admin/drain`), and its dead letters out of one cluster and into another (`GET /admin/dlq/export`,
`POST /admin/dlq/import`, idempotent by message id).

The transport, the token and the error answers are every admin call's (apps.transactions.broker_admin.BrokerAdmin). Brokers are the ones registered in
the cluster's ZooKeeper now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from apps.transactions.broker_admin import BrokerAdmin, BrokerAdminError, BrokerEndpoint, live_brokers

# An import body stays under the brokers' limit on import requests (8 MiB; an export page is at most 4 MiB of
# message bodies, in base64 in the JSON).
IMPORT_BODY_BYTES = 7_000_000
GROUP_FIGURES = ("backlog", "in_flight", "dead_letters", "consumers")


class AdminClient(BrokerAdmin):
    """One broker's admin API with what a move asks it (the transport is every admin call's)."""

    def drain(self, topic: str) -> dict:
        """`{"topic", "held", "retired", "prepared", "groups": {group: {"backlog", "in_flight", "dead_letters",
        "consumers"}}}`; a group's backlog counts its messages in flight too."""
        return self._call("GET", "/admin/drain", params={"topic": topic})

    def export_dead_letters(self, *, topic: str, group: str, after: str | None, limit: int) -> dict:
        """A page of a group's dead letters, whole (body and headers): `{"dead_letters": [...], "next_after"}`."""
        return self._call("GET", "/admin/dlq/export", params={"topic": topic, "group": group, "limit": limit,
                                                              "after": after or None})

    def import_dead_letters(self, *, topic: str, group: str, dead_letters: list[dict]) -> dict:
        return self._call("POST", "/admin/dlq/import",
                          body={"topic": topic, "group": group, "dead_letters": dead_letters})


def _endpoints(cluster) -> list[BrokerEndpoint]:
    endpoints = sorted(live_brokers(cluster), key=lambda e: e.node_id)
    if not endpoints:
        raise BrokerAdminError(f"no broker of cluster {cluster.name} is registered in its ZooKeeper: start one "
                               f"(the move waits and retries)")
    return endpoints


def clients(cluster) -> list[AdminClient]:
    """An admin client of every broker registered in the cluster now; none registered is an error (the move
    cannot see what the cluster holds)."""
    return [AdminClient(e) for e in _endpoints(cluster)]


def import_client(cluster) -> AdminClient:
    """The broker of `cluster` that dead letters are imported into: the first registered by node id, so a
    resumed import goes to the same broker (imports are idempotent by message id there)."""
    return AdminClient(_endpoints(cluster)[0])


@dataclass
class Drain:
    """A topic's figures summed over a cluster's brokers (and per broker, for the move's page)."""

    brokers: int = 0
    holding: int = 0  # brokers that still hold the topic
    messages: int = 0  # stored and not yet finished by every group they are owed to
    prepared: int = 0
    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    per_broker: dict[str, dict] = field(default_factory=dict)

    def total(self, figure: str) -> int:
        return sum(g.get(figure, 0) for g in self.groups.values())

    @property
    def empty(self) -> bool:
        """Nothing left to deliver (docs/broker-admin-api.md): no message, no backlog (in flight included), no
        prepared transaction message, on any broker."""
        return self.messages == 0 and self.prepared == 0 and self.total("backlog") == 0

    def not_applied(self, revision: int, grants: set[str], groups: set[str]) -> list[str]:
        """What some broker has not applied yet of the topic at `revision` with these producer grants and bound
        groups (empty: every broker serves it as the control plane wants)."""
        out = []
        for node, b in sorted(self.per_broker.items()):
            if not b["held"] or b["revision"] != revision:
                out.append(f"{node}: topic revision {b['revision']} (wants {revision})")
            missing = sorted(grants - set(b["grants"])) + sorted(groups - set(b["bound"]))
            if missing:
                out.append(f"{node}: not yet {', '.join(missing)}")
        return out

    def as_dict(self) -> dict:
        return {"brokers": self.brokers, "holding": self.holding, "messages": self.messages,
                "prepared": self.prepared, "backlog": self.total("backlog"), "in_flight": self.total("in_flight"),
                "dead_letters": self.total("dead_letters"), "groups": self.groups,
                "per_broker": {n: {k: v for k, v in b.items() if k not in ("grants", "bound")}
                               for n, b in self.per_broker.items()}}


def drain_of(cluster, topic: str) -> Drain:
    """Ask every registered broker of the cluster how much of `topic` it still holds."""
    out = Drain()
    for client in clients(cluster):
        with client:
            answer = client.drain(topic)
        groups = answer.get("groups") or {}
        out.brokers += 1
        out.holding += 1 if answer.get("held") else 0
        out.messages += int(answer.get("messages") or 0)
        out.prepared += int(answer.get("prepared") or 0)
        for group, figures in groups.items():
            total = out.groups.setdefault(group, dict.fromkeys(GROUP_FIGURES, 0))
            for name in GROUP_FIGURES:
                total[name] += int((figures or {}).get(name) or 0)
        out.per_broker[client.endpoint.node_id] = {
            "held": bool(answer.get("held")), "retired": bool(answer.get("retired")),
            "revision": answer.get("revision"), "messages": int(answer.get("messages") or 0),
            "prepared": int(answer.get("prepared") or 0),
            "backlog": sum(int((g or {}).get("backlog") or 0) for g in groups.values()),
            "grants": list(answer.get("grants") or []),
            "bound": [g for g, f in groups.items() if (f or {}).get("bound")]}
    return out


def import_batches(dead_letters: list[dict], limit: int = IMPORT_BODY_BYTES) -> list[list[dict]]:
    """Split dead letters into import bodies under the brokers' size limit (one dead letter per body at least)."""
    batches: list[list[dict]] = [[]]
    size = 0
    for dl in dead_letters:
        n = len(json.dumps(dl, separators=(",", ":"))) + 1
        if batches[-1] and size + n > limit:
            batches.append([])
            size = 0
        batches[-1].append(dl)
        size += n
    return [b for b in batches if b]
