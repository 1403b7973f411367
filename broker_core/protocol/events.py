"""Typed commands (events), the message array they carry, and an event's frame bytes. No I/O."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack

from broker_core.protocol.constants import (
    CLIENT,
    E_BAD_FRAME,
    HEADER,
    MAGIC,
    MESSAGE_FIELDS,
    PROTOCOL_VERSION,
    SERVER,
)


class ProtocolError(Exception):
    """A frame the receiver cannot accept. The connection that sent it must be closed."""

    def __init__(self, message: str, code: str = E_BAD_FRAME):
        super().__init__(message)
        self.code = code

    def to_frame(self) -> bytes:
        return encode_frame(Error(ref=None, code=self.code, message=str(self), fatal=True))


# --- messages ------------------------------------------------------------------------------


def message(
    message_id: str,
    message_type: str,
    body: bytes,
    *,
    key: str | None = None,
    business_id: str | None = None,
    headers: dict[str, str] | None = None,
    ttl_ms: int = 0,
    delivery_limit: int = 0,
    flags: int = 0,
    timestamp_ms: int = 0,
) -> list:
    """One message as the array the protocol carries and the store keeps."""
    return [message_id, message_type, key, business_id, headers or {}, body, ttl_ms, delivery_limit, flags,
            timestamp_ms]


def check_message(m) -> list:
    """Check a message array field by field; raises ProtocolError if malformed."""
    if type(m) is not list or len(m) < MESSAGE_FIELDS:
        raise ProtocolError("malformed message: expected an array of 10 fields")
    mid, mtype, key, bid, headers, body, ttl, limit, flags, ts = m if len(m) == MESSAGE_FIELDS else m[:10]
    if not (
        type(mid) is str and type(mtype) is str and type(body) is bytes and type(headers) is dict
        and type(ttl) is int and type(limit) is int and type(flags) is int and type(ts) is int
        and ttl >= 0 and limit >= 0 and (key is None or type(key) is str) and (bid is None or type(bid) is str)
        and 0 < len(mid) <= 64 and len(mtype) <= 255
    ):
        raise ProtocolError("malformed message: a field has the wrong type")
    return m


# --- events --------------------------------------------------------------------------------


# --- events --------------------------------------------------------------------------------


class Event:
    """A typed command. `fields()` gives the msgpack body; `from_body` checks and builds one."""

    code: ClassVar[int]
    sender: ClassVar[str]  # CLIENT, SERVER or "both"
    schema: ClassVar[tuple]  # per field: a type, a tuple of types, or None for "anything"
    field_names: ClassVar[tuple[str, ...]] = ()  # set once the event classes are defined

    def fields(self) -> list:
        return [getattr(self, name) for name in self.field_names]

    @classmethod
    def from_body(cls, body: Any) -> Event:
        if type(body) is not list or len(body) < len(cls.schema):
            raise ProtocolError(f"malformed {cls.__name__}: expected {len(cls.schema)} fields")
        for value, kind in zip(body, cls.schema, strict=False):
            if kind is not None and not isinstance(value, kind):
                raise ProtocolError(f"malformed {cls.__name__}: a field has the wrong type")
        return cls(*body[: len(cls.schema)])


_NONE = type(None)
_OPT_STR = (str, _NONE)
_OPT_INT = (int, _NONE)


@dataclass(slots=True)
class Hello(Event):
    """First frame of a client: who it is and how often it will be heard from."""

    code: ClassVar[int] = 1
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, str, str, str, int, dict)
    version: int
    client_id: str
    app_id: str
    secret: str
    heartbeat_ms: int
    features: dict = field(default_factory=dict)


@dataclass(slots=True)
class Publish(Event):
    """Store these messages on the topic; answered by `Published` or `Error` with the same ref."""

    code: ClassVar[int] = 2
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, str, list)
    ref: int
    topic: str
    messages: list  # of message arrays (see `message`)
    partition: int | None = None  # issue 20: the partition (its leader takes it); None: the broker's choice

    @classmethod
    def from_body(cls, body: Any) -> Event:
        ev = super(Publish, cls).from_body(body)
        if len(body) > 3 and body[3] is not None:
            if type(body[3]) is not int or body[3] < 0:
                raise ProtocolError("malformed Publish: partition must be a non-negative integer")
            ev.partition = body[3]
        return ev


@dataclass(slots=True)
class Subscribe(Event):
    code: ClassVar[int] = 3
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, str, str, int, int)
    ref: int
    topic: str
    group: str
    credit: int  # how many unacknowledged messages the consumer accepts (NSQ's RDY)
    ack_timeout_ms: int  # 0: the broker's default


@dataclass(slots=True)
class Ready(Event):
    """Change the credit of a subscription."""

    code: ClassVar[int] = 4
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, int)
    sub_id: int
    credit: int


@dataclass(slots=True)
class Ack(Event):
    code: ClassVar[int] = 5
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, list)
    sub_id: int
    seqs: list


@dataclass(slots=True)
class Nack(Event):
    """Refuse messages: each item is [seq, delay_ms or -1 for the binding's backoff, reason]."""

    code: ClassVar[int] = 6
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, list)
    sub_id: int
    items: list


@dataclass(slots=True)
class Unsubscribe(Event):
    code: ClassVar[int] = 7
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int,)
    sub_id: int


@dataclass(slots=True)
class Ping(Event):
    code: ClassVar[int] = 8
    sender: ClassVar[str] = "both"
    schema: ClassVar[tuple] = ()


@dataclass(slots=True)
class Pong(Event):
    code: ClassVar[int] = 9
    sender: ClassVar[str] = "both"
    schema: ClassVar[tuple] = ()


@dataclass(slots=True)
class ListDeadLetters(Event):
    code: ClassVar[int] = 10
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, str, str, int)
    ref: int
    topic: str
    group: str
    limit: int


@dataclass(slots=True)
class Goodbye(Event):
    """The sender will close the connection; the receiver should not expect more frames."""

    code: ClassVar[int] = 11
    sender: ClassVar[str] = "both"
    schema: ClassVar[tuple] = (str,)
    reason: str = ""


# --- transaction messages (codes 12-15; 16-19 and 27 stay reserved) ---------------------------
#
# A producer publishes messages with FLAG_PREPARED (a Publish holds only prepared or only plain
# messages; only topics whose ZooKeeper document says "transactional": true accept prepared ones).
# It then ends each one with EndTx (commit or roll back), answered by TxEnded with the state the
# message is in now. A connection whose Hello said features={"check_listener": true} may receive
# CheckTx from the broker (a back-check) and answers TxState with the same check_id.


@dataclass(slots=True)
class EndTx(Event):
    """Commit (`commit` true) or roll back a prepared message; answered by `TxEnded` or `Error`."""

    code: ClassVar[int] = 12
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, str, str, bool)
    ref: int
    topic: str
    message_id: str
    commit: bool


@dataclass(slots=True)
class TxEnded(Event):
    """The state of the message after `EndTx` `ref`: "committed" or "rolled_back". `changed` is
    false when it was already in a final state (then `state` is that state, maybe not the one asked)."""

    code: ClassVar[int] = 13
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (int, str, str, bool)
    ref: int
    message_id: str
    state: str
    changed: bool


@dataclass(slots=True)
class CheckTx(Event):
    """Back-check: the broker asks the producing app what became of a prepared message."""

    code: ClassVar[int] = 14
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (int, str, str, str, _OPT_STR, _OPT_STR, dict)
    check_id: int
    topic: str
    message_id: str
    message_type: str
    key: str | None
    business_id: str | None
    headers: dict


@dataclass(slots=True)
class TxState(Event):
    """The answer to `CheckTx` `check_id`: "commit", "rollback" or "unknown"."""

    code: ClassVar[int] = 15
    sender: ClassVar[str] = CLIENT
    schema: ClassVar[tuple] = (int, str, str)
    check_id: int
    message_id: str
    state: str



@dataclass(slots=True)
class Welcome(Event):
    code: ClassVar[int] = 20
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (int, str, str, int, int)
    version: int
    node_id: str
    cluster: str
    heartbeat_ms: int
    max_frame: int


@dataclass(slots=True)
class Published(Event):
    """The messages of `Publish` `ref` are stored; seqs are their positions on this broker."""

    code: ClassVar[int] = 21
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (int, int, int)
    ref: int
    first_seq: int
    count: int


@dataclass(slots=True)
class Subscribed(Event):
    code: ClassVar[int] = 22
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (int, int, str, int, int)
    ref: int
    sub_id: int
    mode: str
    credit: int
    ack_timeout_ms: int


@dataclass(slots=True)
class Deliver(Event):
    """Messages for one subscription: each item is [seq, attempt, message array]."""

    code: ClassVar[int] = 23
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (int, list)
    sub_id: int
    items: list


@dataclass(slots=True)
class Error(Event):
    """A refusal. `ref` names the request it answers (None: the connection); fatal: it will close."""

    code: ClassVar[int] = 24
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (_OPT_INT, str, str, bool)
    ref: int | None
    code_name: str  # the error code (E_*); `code` is already the frame's command number
    message: str
    fatal: bool = False

    def __init__(self, ref: int | None, code: str, message: str, fatal: bool = False):
        self.ref = ref
        self.code_name = code
        self.message = message
        self.fatal = fatal

    @property
    def error_code(self) -> str:
        return self.code_name


@dataclass(slots=True)
class DeadLetters(Event):
    """Dead letters of one group: each entry a dict (see `broker_core.storage.store.DeadLetter.to_dict`)."""

    code: ClassVar[int] = 25
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (int, list)
    ref: int
    entries: list


@dataclass(slots=True)
class Unsubscribed(Event):
    """The broker ended a subscription (its binding was removed or changed hands)."""

    code: ClassVar[int] = 26
    sender: ClassVar[str] = SERVER
    schema: ClassVar[tuple] = (int, str)
    sub_id: int
    reason: str


# Code 27 stays reserved (room for a later transaction command).

EVENTS: dict[int, type[Event]] = {
    cls.code: cls
    for cls in (Hello, Publish, Subscribe, Ready, Ack, Nack, Unsubscribe, Ping, Pong, ListDeadLetters, Goodbye,
                EndTx, TxEnded, CheckTx, TxState,
                Welcome, Published, Subscribed, Deliver, Error, DeadLetters, Unsubscribed)
}
RESERVED_CODES = frozenset(range(16, 20)) | {27}
for _cls in EVENTS.values():
    _cls.field_names = tuple(f.name for f in dataclasses.fields(_cls))

_PING_FRAME = HEADER.pack(MAGIC, PROTOCOL_VERSION, Ping.code, 1) + msgpack.packb([])
_PONG_FRAME = HEADER.pack(MAGIC, PROTOCOL_VERSION, Pong.code, 1) + msgpack.packb([])


_packers = threading.local()


def encode_frame(event: Event) -> bytes:
    if type(event) is Ping:
        return _PING_FRAME
    if type(event) is Pong:
        return _PONG_FRAME
    # one Packer per thread, kept: its buffer stays as large as the largest frame so far, where msgpack.packb
    # starts a new one (256 KiB) each time and grows it by realloc, which copies it whenever the heap cannot
    # extend it in place (a delivery frame of up to 1 MiB: often)
    packer = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    body = packer.pack(event.fields())
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, event.code, len(body)) + body
