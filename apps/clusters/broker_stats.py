"""Live figures from a cluster's brokers: each registered node's `/stats`, read now, and their sum per
topic and group.

Brokers serve `/stats` on their metrics port (see broker_core/node/broker.py `Broker.stats`), to callers that send
the brokers' admin token (SWITCHYARD_BROKER_ADMIN_TOKEN). Every read is
bounded by SWITCHYARD_BROKER_STATS_TIMEOUT and the nodes are read in parallel, so one slow or dead
broker costs the page at most one timeout; nothing here writes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
from django.conf import settings

from apps.clusters.zookeeper import BrokerNode, ClusterHealth

GROUP_FIGURES = ("depth", "in_flight", "delivered", "acked", "nacked", "redelivered", "timed_out", "dead_lettered",
                 "expired", "dead_letter_queue", "consumers")
TOPIC_FIGURES = ("published", "published_bytes", "publish_failures", "scheduled")  # scheduled: delayed, not due


@dataclass
class NodeStats:
    node: BrokerNode
    stats: dict | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.stats is not None


@dataclass
class GroupFigures:
    topic: str
    group: str
    mode: str = ""
    bound: bool = False
    figures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUP_FIGURES, 0))


@dataclass
class TopicFigures:
    topic: str
    figures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOPIC_FIGURES, 0))


@dataclass
class ClusterStats:
    nodes: list[NodeStats]
    topics: list[TopicFigures]
    groups: list[GroupFigures]

    @property
    def answered(self) -> int:
        return sum(1 for n in self.nodes if n.ok)


def fetch_node_stats(node: BrokerNode, timeout: float | None = None) -> NodeStats:
    if not node.metrics_port:
        return NodeStats(node, error="the broker registered no metrics port")
    timeout = timeout or settings.SWITCHYARD_BROKER_STATS_TIMEOUT
    url = f"http://{node.host}:{node.metrics_port}/stats"
    headers = {}
    if settings.SWITCHYARD_BROKER_ADMIN_TOKEN:  # /stats is behind the brokers' admin token
        headers["Authorization"] = f"Bearer {settings.SWITCHYARD_BROKER_ADMIN_TOKEN}"
    try:
        response = httpx.get(url, headers=headers, timeout=timeout, follow_redirects=False, trust_env=False)
        if response.is_success:
            return NodeStats(node, stats=response.json())
    except (httpx.HTTPError, ValueError) as exc:
        return NodeStats(node, error=f"{url} did not answer within {timeout:g}s: {exc or type(exc).__name__}")
    return NodeStats(node, error=f"{url} refused the read ({response.status_code} {response.reason_phrase}): the "
                                 "control plane's SWITCHYARD_BROKER_ADMIN_TOKEN must be the broker's admin token")


def summarize(nodes: list[NodeStats]) -> ClusterStats:
    """Add up the figures of every node that answered, per topic and per (topic, group)."""
    topics: dict[str, TopicFigures] = {}
    groups: dict[tuple[str, str], GroupFigures] = {}
    for node in nodes:
        for topic_name, topic in (node.stats or {}).get("topics", {}).items():
            t = topics.setdefault(topic_name, TopicFigures(topic_name))
            for key in TOPIC_FIGURES:
                t.figures[key] += int(topic.get(key) or 0)
            for group_name, group in topic.get("groups", {}).items():
                g = groups.setdefault((topic_name, group_name), GroupFigures(topic_name, group_name))
                g.mode = g.mode or group.get("mode", "")
                g.bound = g.bound or bool(group.get("bound"))
                for key in GROUP_FIGURES:
                    g.figures[key] += int(group.get(key) or 0)
    return ClusterStats(nodes=nodes, topics=[topics[k] for k in sorted(topics)],
                        groups=[groups[k] for k in sorted(groups)])


def topic_figures(stats: ClusterStats, topic: str) -> TopicFigures | None:
    """One topic's summed figures (None: no broker that answered holds it)."""
    return next((t for t in stats.topics if t.topic == topic), None)


def read_cluster_stats(health: ClusterHealth) -> ClusterStats:
    """Read `/stats` from every broker registered in `health` (as read from ZooKeeper just before)."""
    if not health.brokers:
        return ClusterStats(nodes=[], topics=[], groups=[])
    with ThreadPoolExecutor(max_workers=min(8, len(health.brokers))) as pool:
        nodes = list(pool.map(fetch_node_stats, health.brokers))
    return summarize(nodes)
