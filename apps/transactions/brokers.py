"""Which brokers a cluster has now, and an admin client for one of them."""

from __future__ import annotations

from apps.transactions.broker_admin import BrokerAdmin, BrokerEndpoint, live_brokers


def admin_for(cluster, node_id: str) -> BrokerAdmin:
    """An admin client of the named broker of the cluster (LookupError when it is not registered now)."""
    for endpoint in live_brokers(cluster):
        if endpoint.node_id == node_id:
            return BrokerAdmin(endpoint)
    raise LookupError(f"broker {node_id} is not registered in {cluster.name}'s ZooKeeper now")


def admin_at(node_id: str, host: str, metrics_port: int) -> BrokerAdmin:
    return BrokerAdmin(BrokerEndpoint(node_id, host, int(metrics_port)))
