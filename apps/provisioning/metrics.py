"""Prometheus figures of ZooKeeper drift, served at the control plane's /metrics (web process).

Read from the database at scrape time (the last reachable reconcile run of each active cluster), so they
hold whichever worker ran the reconcile.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster
from apps.provisioning.reconcile import latest_run


class DriftCollector:
    """Per active cluster: nodes its last reconcile found drifted and left so (ACL drift included)."""

    def collect(self):
        drift = GaugeMetricFamily("switchyard_zookeeper_drift_objects", "ZooKeeper nodes that differ from the "
                                  "platform's desired state (content or ACL) and were not repaired, as of the "
                                  "cluster's last reconcile", labels=["cluster"])
        for cluster in Cluster.objects.filter(status=ClusterStatus.ACTIVE).order_by("name"):
            run = latest_run(cluster)
            drift.add_metric([cluster.name], run.unrepaired if run is not None else 0)
        yield drift
