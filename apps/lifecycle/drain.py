"""What the brokers still hold of a topic, per consumer group: the brokers' `GET /admin/drain?topic=T`, summed over
every broker of every cluster holding the topic.

One answer per broker (docs/broker-admin-api.md): {"topic", "held", "retired", "messages", "prepared", "groups":
{"<group>": {"backlog", "in_flight", "dead_letters", "consumers"}}}; a group's `backlog` counts its messages not
acknowledged yet, those in flight included. Brokers are found in each cluster's ZooKeeper (/brokers/<node>: host
and metrics port) and called with the brokers' admin token, each call bounded by SWITCHYARD_BROKER_ADMIN_TIMEOUT.
Nothing here writes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import httpx
from django.conf import settings

from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.transactions.broker_admin import live_brokers

log = logging.getLogger(__name__)
GROUP_FIGURES = ("backlog", "in_flight", "dead_letters", "consumers")
TOPIC_FIGURES = ("messages", "prepared", "held")  # held: how many brokers hold the topic


@dataclass
class Drain:
    """The sum over the brokers that answered; `errors` says which could not be read (then the figures are a
    lower bound, and nothing may be concluded from a zero)."""

    topic: str
    figures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOPIC_FIGURES, 0))
    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    brokers: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every cluster had brokers and every broker answered."""
        return self.brokers > 0 and not self.errors

    def group(self, name: str) -> dict[str, int]:
        return self.groups.get(name) or dict.fromkeys(GROUP_FIGURES, 0)

    def add(self, answer) -> None:
        if not isinstance(answer, dict) or not isinstance(answer.get("groups") or {}, dict):
            raise ValueError(f"not a drain answer: {str(answer)[:200]}")
        self.brokers += 1
        for key in TOPIC_FIGURES:
            self.figures[key] += int(answer.get(key) or 0)
        for name, figures in (answer.get("groups") or {}).items():
            into = self.groups.setdefault(name, dict.fromkeys(GROUP_FIGURES, 0))
            for key in GROUP_FIGURES:
                into[key] += int((figures or {}).get(key) or 0)


def read_drain(topic_name: str, clusters) -> Drain:
    """Ask every broker of `clusters` what it holds of `topic_name`."""
    drain = Drain(topic_name)
    headers = {"Accept": "application/json", "Authorization": f"Bearer {settings.SWITCHYARD_BROKER_ADMIN_TOKEN}"}
    with httpx.Client(timeout=settings.SWITCHYARD_BROKER_ADMIN_TIMEOUT, headers=headers,
                      follow_redirects=False) as client:
        for cluster in clusters:
            try:
                brokers = live_brokers(cluster)
            except ZooKeeperUnreachable as exc:
                drain.errors.append(f"cluster {cluster.name}: ZooKeeper unreachable ({exc})")
                continue
            if not brokers:
                drain.errors.append(f"cluster {cluster.name}: no broker registered in ZooKeeper")
            for broker in brokers:
                where = f"broker {broker.node_id} of {cluster.name} ({broker.host}:{broker.metrics_port})"
                try:
                    response = client.get(f"http://{broker.host}:{broker.metrics_port}/admin/drain",
                                          params={"topic": topic_name})
                    response.raise_for_status()
                    drain.add(response.json())
                except (httpx.HTTPError, ValueError) as exc:
                    drain.errors.append(f"{where}: {type(exc).__name__} {exc}")
    if drain.errors:
        log.warning("drain of topic %s incomplete: %s", topic_name, "; ".join(drain.errors))
    return drain
