"""What a producer and a consumer both take: where the brokers are found and how a connection introduces itself."""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.client.locator import Locator


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """The keyword arguments `AsyncProducer`, `Producer`, `AsyncConsumer` and `Consumer` share.

    Where the brokers are, one of: `zk` (a cluster's ZooKeeper connect string with its chroot), `control_plane`
    (its URL) with `environment` (and `api_token` if the endpoint asks for one), or `brokers` ("host:port"
    addresses, no route). `cache_dir` keeps the last known routes and broker lists (docs/routing.md).
    `client_id` names the connection in the broker's logs and figures (default "<producer|consumer>-<host>-<pid>");
    `heartbeat_ms` is the heartbeat the client promises; `connect_timeout` bounds finding the route and a broker.
    """

    app_id: str
    secret: str = field(repr=False)
    zk: str | None = None
    control_plane: str | None = None
    environment: str | None = None
    brokers: list[str] | None = None
    client_id: str | None = None
    heartbeat_ms: int = 5000
    connect_timeout: float = 5.0
    cache_dir: str | Path | None = None
    api_token: str | None = field(default=None, repr=False)

    def named(self, role: str) -> ClientOptions:
        """These options with a `client_id`: the one given, else "<role>-<host>-<pid>"."""
        if self.client_id:
            return self
        return dataclasses.replace(self, client_id=f"{role}-{socket.gethostname()}-{os.getpid()}")

    def locator(self) -> Locator:
        """A Locator of the routes and brokers these options point to (raises ValueError when they point nowhere)."""
        return Locator(zk=self.zk, control_plane=self.control_plane, environment=self.environment,
                       brokers=self.brokers, cache_dir=self.cache_dir, api_token=self.api_token,
                       start_timeout=self.connect_timeout)

    def conn_args(self) -> dict:
        """How a connection introduces itself (`BrokerConnection.open` arguments)."""
        return {"app_id": self.app_id, "secret": self.secret, "client_id": self.client_id,
                "heartbeat_ms": self.heartbeat_ms}
