"""The Python SDK of the Switchyard broker (it reuses `broker_core.protocol` for the wire format).

    from broker_core.client import Producer, Consumer, Message

See `producer.py` and `consumer.py` for the details; `discovery.py` for how brokers are found.
"""

from broker_core.client.consumer import AsyncConsumer, Consumer, Nack, ReceivedMessage
from broker_core.client.errors import (
    AuthError,
    BrokerError,
    ConnectionLost,
    NoBrokers,
    SendTimeout,
    SwitchyardError,
)
from broker_core.client.producer import AsyncProducer, Message, Producer
from broker_core.client.transactions import PreparedMessage, TxCheck, TxResult

__all__ = [
    "AsyncConsumer", "AsyncProducer", "AuthError", "BrokerError", "ConnectionLost", "Consumer", "Message", "Nack",
    "NoBrokers", "PreparedMessage", "Producer", "ReceivedMessage", "SendTimeout", "SwitchyardError", "TxCheck",
    "TxResult",
]
