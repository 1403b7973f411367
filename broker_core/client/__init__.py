"""The Python SDK of the Switchyard broker (it reuses `broker_core.protocol` for the wire format).

    from broker_core.client import Producer, Consumer, Message

See `producer.py` and `consumer.py` for the details, `options.py` for the arguments both take (`ClientOptions`),
`locator.py` for how a topic's route and brokers are found and followed (docs/routing.md), `routes.py` for the
route document.
"""

from broker_core.client.consumer import AsyncConsumer, Consumer, Nack, ReceivedMessage
from broker_core.client.errors import (
    AuthError,
    BrokerError,
    ConnectionLost,
    ControlPlaneError,
    ControlPlaneUnreachable,
    NoBrokers,
    RouteUnknown,
    SendTimeout,
    SwitchyardError,
    ZooKeeperUnreachable,
)
from broker_core.client.options import ClientOptions
from broker_core.client.producer import AsyncProducer, Message, Producer
from broker_core.client.routes import Route
from broker_core.client.transactions import PreparedMessage, TxCheck, TxResult

__all__ = [
    "AsyncConsumer", "AsyncProducer", "AuthError", "BrokerError", "ClientOptions", "ConnectionLost", "ControlPlaneError",
    "ControlPlaneUnreachable", "Consumer", "Message", "Nack", "NoBrokers", "PreparedMessage", "Producer",
    "ReceivedMessage", "Route", "RouteUnknown", "SendTimeout", "SwitchyardError", "TxCheck", "TxResult",
    "ZooKeeperUnreachable",
]
