"""Prometheus figures of the clusters' partitions (issue 20), served at the control plane's /metrics.

Read from each active cluster's ZooKeeper at scrape time (`/placement`, `/partition-state`, `/brokers`); a
cluster whose ZooKeeper does not answer has no sample (its unreachability is an alarm of its own).
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster
from apps.clusters.zookeeper import read_health


class PartitionCollector:
    """Per active cluster: its partitions with fewer in-sync replicas than placed, and those without a leader."""

    def collect(self):
        under = GaugeMetricFamily("switchyard_under_replicated_partitions", "Partitions whose in-sync replicas "
                                  "are fewer than their replicas (a broker holding them is down or behind)",
                                  labels=["cluster"])
        offline = GaugeMetricFamily("switchyard_offline_partitions", "Partitions whose leader is not registered "
                                    "in ZooKeeper (no broker takes their publishes)", labels=["cluster"])
        for cluster in Cluster.objects.filter(status=ClusterStatus.ACTIVE).order_by("name"):
            health = read_health(cluster, timeout=1.0)  # a scrape must not wait long on one cluster
            if not health.reachable:
                continue
            under.add_metric([cluster.name], health.under_replicated)
            offline.add_metric([cluster.name], sum(p.offline for t in health.partitions for p in t.partitions))
        yield under
        yield offline
