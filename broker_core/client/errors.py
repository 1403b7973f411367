"""Errors the SDK raises. Broker refusals carry the broker's error code (`broker_core.protocol.E_*`).

A client that cannot start says why (docs/routing.md): `RouteUnknown`, `ControlPlaneUnreachable`,
`ZooKeeperUnreachable`, `NoBrokers` — each message names the cause and what to do.
"""

from __future__ import annotations


class SwitchyardError(Exception):
    pass


class BrokerError(SwitchyardError):
    """The broker refused a request; `code` says why (e.g. "not_granted", "no_binding")."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class AuthError(BrokerError):
    """Wrong app id or secret, or an inactive app."""


class ConnectionLost(SwitchyardError):
    """The connection closed before the broker answered."""


class NoBrokers(SwitchyardError):
    """ZooKeeper answered, but no broker of the cluster is registered in it (and no broker list is cached)."""


class ZooKeeperUnreachable(NoBrokers):
    """The cluster's ZooKeeper did not answer in time and no broker list of the cluster is cached."""


class ControlPlaneError(SwitchyardError):
    """The control plane's route endpoint refused the request (`status`: its HTTP status, 0 if none)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class RouteUnknown(ControlPlaneError):
    """The control plane has no active topic of that name in that environment (it answered 404)."""


class ControlPlaneUnreachable(ControlPlaneError):
    """The control plane did not answer (or failed) and no route of the topic is cached on disk."""


class SendTimeout(SwitchyardError):
    """A message was not acknowledged within the send timeout; it may or may not have been stored."""
