"""What a client connection (`server.ClientConnection`) uses of its broker node: the node hands itself in
(`broker.Broker` is one), so the connection never imports the node that creates it."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Protocol

from broker_core.auth import VerifiedCache
from broker_core.cluster.state import ClusterState
from broker_core.delivery.topic import Topic
from broker_core.delivery.transactions import TxService
from broker_core.node.options import Options


class ConnectionHost(Protocol):
    options: Options
    node_id: str
    state: ClusterState
    topics: dict[str, Topic]
    tx: TxService
    verified: VerifiedCache  # secrets already checked, by app
    auth_executor: Executor  # where slow (legacy) secret checks run
    connections: set  # every open connection (a server.ClientConnection) adds and removes itself
    connections_per_host: dict[str, int]
    refused_connections: int  # counters the connections raise
    auth_failures: int

    def topic(self, name: str) -> Topic:
        """The topic, opened on this broker if it was not yet."""
        ...
