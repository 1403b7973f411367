"""Errors the SDK raises. Broker refusals carry the broker's error code (`broker_core.protocol.E_*`)."""

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
    """Discovery found no live broker for the cluster (and no cached list)."""


class SendTimeout(SwitchyardError):
    """A message was not acknowledged within the send timeout; it may or may not have been stored."""
