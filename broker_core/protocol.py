"""The wire protocol, version 1: frames, typed commands and a connection state machine with no I/O.

A frame is an 8-byte header followed by a msgpack body:

    magic  b"SY"   2 bytes
    version        1 byte   (PROTOCOL_VERSION)
    command        1 byte   (the `code` of one event class below)
    length         4 bytes  big-endian length of the body

`Connection` works like h11: feed it bytes with `receive_data`, take events out with `next_event`
(it returns `NEED_DATA` when a frame is incomplete), and turn events into bytes with `send`.
It raises `ProtocolError` for a frame it cannot accept (bad magic or version, unknown command,
oversized, malformed body, or a command the peer's role may not send); the caller answers with the
error's `to_frame()` and closes that connection.

Messages travel as arrays nested in the frame (see `message`): a frame of a thousand messages is
one msgpack call on each side, which is what keeps the per-message cost low in Python.

This module does no I/O and never imports asyncio (the broker and the SDK both reuse it).
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack

PROTOCOL_VERSION = 1
MAGIC = b"SY"
HEADER = struct.Struct(">2sBBI")
HEADER_SIZE = HEADER.size
DEFAULT_MAX_FRAME = 16 * 1024 * 1024

# Message flags (stored with the message). FLAG_PREPARED: a transaction message, stored and not
# deliverable until the producer (or a back-check) commits it with `EndTx`.
FLAG_PREPARED = 0x01

# Transaction states (`TxEnded.state`, the broker admin API) and check answers (`TxState.state`).
TX_PREPARED, TX_COMMITTED, TX_ROLLED_BACK = "prepared", "committed", "rolled_back"
TX_COMMIT, TX_ROLLBACK, TX_UNKNOWN = "commit", "rollback", "unknown"
TX_ANSWERS = (TX_COMMIT, TX_ROLLBACK, TX_UNKNOWN)

# `Hello.features` keys. check_listener: true -> this connection answers `CheckTx` with `TxState`.
FEATURE_CHECK_LISTENER = "check_listener"

# Error codes carried by `Error` frames.
E_BAD_FRAME = "bad_frame"
E_TOO_LARGE = "frame_too_large"
E_UNSUPPORTED = "unsupported"
E_NOT_AUTHENTICATED = "not_authenticated"
E_AUTH_FAILED = "auth_failed"
E_NOT_GRANTED = "not_granted"
E_NO_BINDING = "no_binding"
E_UNKNOWN_TOPIC = "unknown_topic"
E_TOPIC_RETIRED = "topic_retired"  # the topic takes no new messages (its backlog is still delivered)
E_INVALID = "invalid"
E_STORE_FAILED = "store_failed"
E_UNKNOWN_MESSAGE = "unknown_message"
E_HEARTBEAT = "heartbeat_timeout"
E_SLOW_CONSUMER = "slow_consumer"
E_SHUTTING_DOWN = "shutting_down"
E_TOO_MANY_CONNECTIONS = "too_many_connections"
E_INTERNAL = "internal"


class ProtocolError(Exception):
    """A frame the receiver cannot accept. The connection that sent it must be closed."""

    def __init__(self, message: str, code: str = E_BAD_FRAME):
        super().__init__(message)
        self.code = code

    def to_frame(self) -> bytes:
        return encode_frame(Error(ref=None, code=self.code, message=str(self), fatal=True))


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()

# --- messages ------------------------------------------------------------------------------

# A message travels (and is stored) as a msgpack array of these fields, nested in the frame, so a
# frame of many messages is packed and unpacked by one msgpack call. Append new fields at the end only.
M_ID, M_TYPE, M_KEY, M_BUSINESS_ID, M_HEADERS, M_BODY, M_TTL_MS, M_DELIVERY_LIMIT, M_FLAGS, M_TIMESTAMP_MS = range(10)
MESSAGE_FIELDS = 10


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

CLIENT, SERVER = "client", "server"


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
    """Dead letters of one group: each entry a dict (see `broker_core.store.DeadLetter.to_dict`)."""

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


def encode_frame(event: Event) -> bytes:
    if type(event) is Ping:
        return _PING_FRAME
    if type(event) is Pong:
        return _PONG_FRAME
    body = msgpack.packb(event.fields(), use_bin_type=True)
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, event.code, len(body)) + body


# A buffer left empty keeps its memory for the next read up to this size (one read of asyncio or uvloop is at
# most 256 KiB); a larger one, grown for a big frame, is given back once that frame is consumed.
KEEP_BUFFER = 256 * 1024 + HEADER_SIZE


class Connection:
    """One side of a connection: bytes in, events out; events in, bytes out. No I/O.

    `our_role` is CLIENT or SERVER; a frame whose command only our own role may send is refused.

    Memory: the receive buffer holds the unconsumed bytes only (consumed frames are dropped as the next data
    arrives) and its allocation stays within `max_frame` + 8 + the size of one `receive_data` call, as long as
    the caller takes the events out after each call (a caller that stops taking them, e.g. while it checks
    a secret, must stop reading too). A frame whose header declares more than `max_frame` is refused from
    its header, before its body is waited for. `max_frame` may be changed between frames (the broker
    allows only small frames until Hello succeeds); `limit_note` then says why in the refusal.
    """

    def __init__(self, our_role: str, max_frame: int = DEFAULT_MAX_FRAME):
        if our_role not in (CLIENT, SERVER):
            raise ValueError(our_role)
        self.our_role = our_role
        self.max_frame = max_frame
        self.limit_note = ""
        self._buf = bytearray()  # its length is the capacity; data lives in [_pos, _end)
        self._pos = 0
        self._end = 0
        self.frames_received = 0
        self.closed_by_error: ProtocolError | None = None

    # -- receiving

    def receive_data(self, data: bytes) -> None:
        if self.closed_by_error is not None:
            raise self.closed_by_error
        n = len(data)
        if not n:
            return
        if self._pos == self._end:  # everything consumed: start over at the front
            self._pos = self._end = 0
            if len(self._buf) > KEEP_BUFFER and n <= KEEP_BUFFER:
                self._buf = bytearray()  # a big frame has passed: give its memory back
        if self._end + n > len(self._buf):
            self._make_room(n)
        end = self._end
        self._buf[end:end + n] = data  # same length: a copy into place, never a resize
        self._end = end + n

    def _make_room(self, n: int) -> None:
        """Room for n more bytes after the unconsumed ones: move them to the front of the buffer when that is
        enough and cheap, else a larger buffer (doubling, but never past one frame of the limit plus n)."""
        buf, pos, end = self._buf, self._pos, self._end
        tail = end - pos
        needed = tail + n
        limit = self.max_frame + HEADER_SIZE + n
        if needed <= len(buf) and (pos >= tail or len(buf) >= limit):
            buf[:tail] = buf[pos:end]  # the copy costs no more than what was consumed (or once per frame)
        else:
            new = bytearray(max(needed, min(2 * len(buf), limit)))
            new[:tail] = memoryview(buf)[pos:end]
            self._buf = new
        self._pos, self._end = 0, tail

    @property
    def buffered(self) -> int:
        """Bytes received and not consumed yet."""
        return self._end - self._pos

    @property
    def allocated(self) -> int:
        """Bytes the receive buffer holds allocated now (its capacity)."""
        return len(self._buf)

    def next_event(self) -> Event | _NeedData:
        """The next complete event, or NEED_DATA. Raises ProtocolError on a bad frame."""
        if self.closed_by_error is not None:
            raise self.closed_by_error
        try:
            return self._next_event()
        except ProtocolError as exc:
            self.closed_by_error = exc
            raise

    def _next_event(self) -> Event | _NeedData:
        buf, pos, end_of_data = self._buf, self._pos, self._end
        if end_of_data - pos < HEADER_SIZE:
            return NEED_DATA
        magic, version, code, length = HEADER.unpack_from(buf, pos)
        if magic != MAGIC:
            raise ProtocolError("bad frame: wrong magic bytes")
        if version != PROTOCOL_VERSION:
            raise ProtocolError(f"unsupported protocol version {version} (this side speaks {PROTOCOL_VERSION})",
                                E_UNSUPPORTED)
        if length > self.max_frame:
            raise ProtocolError(f"frame of {length} bytes exceeds the limit of {self.max_frame}{self.limit_note}",
                                E_TOO_LARGE)
        cls = EVENTS.get(code)
        if cls is None:
            if code in RESERVED_CODES:
                raise ProtocolError(f"command {code} is reserved and not supported yet", E_UNSUPPORTED)
            raise ProtocolError(f"bad frame: unknown command {code}")
        if cls.sender == self.our_role:
            raise ProtocolError(f"bad frame: {cls.__name__} may not be sent by the {_peer(self.our_role)}")
        end = pos + HEADER_SIZE + length
        if end_of_data < end:
            return NEED_DATA
        try:
            with memoryview(buf) as view:
                body = msgpack.unpackb(view[pos + HEADER_SIZE:end], raw=False, use_list=True, strict_map_key=True)
        except Exception as exc:  # msgpack raises several kinds on garbage
            raise ProtocolError(f"bad frame: body is not valid msgpack ({exc.__class__.__name__})") from None
        self._pos = end
        self.frames_received += 1
        return cls.from_body(body)

    def events(self):
        """Every complete event buffered now (raises ProtocolError like `next_event`)."""
        while True:
            event = self.next_event()
            if event is NEED_DATA:
                return
            yield event

    # -- sending

    def send(self, event: Event) -> bytes:
        if event.sender == _peer(self.our_role):
            raise ValueError(f"{type(event).__name__} is sent by the {_peer(self.our_role)}, not by us")
        return encode_frame(event)


def _peer(role: str) -> str:
    return SERVER if role == CLIENT else CLIENT


def error_body(event: Error) -> dict[str, Any]:
    return {"ref": event.ref, "code": event.code_name, "message": event.message, "fatal": event.fatal}
