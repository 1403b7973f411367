"""Typed commands (events), the message array they carry, and an event's frame bytes. No I/O."""

from __future__ import annotations

import dataclasses
import threading
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack

from broker_core.protocol.constants import (
    BOTH,
    CLIENT,
    E_BAD_FRAME,
    HEADER,
    M_DELIVER_AT_MS,
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
    if len(m) > M_DELIVER_AT_MS and type(m[M_DELIVER_AT_MS]) is not int:
        raise ProtocolError("malformed message: deliver_at_ms must be an integer (Unix ms)")
    return m


# --- events --------------------------------------------------------------------------------


class Event:
    """A typed command: a slotted dataclass whose fields, in order, are its msgpack body (see `_kind`)."""

    code: ClassVar[int]  # the frame's command number
    sender: ClassVar[str]  # CLIENT, SERVER or BOTH
    schema: ClassVar[tuple] = ()  # per field, what a received value must be: a type, or a tuple of types
    field_names: ClassVar[tuple[str, ...]] = ()

    def fields(self) -> list:
        return [getattr(self, name) for name in self.field_names]

    @classmethod
    def from_body(cls, body: Any) -> Event:
        if type(body) is not list or len(body) < len(cls.schema):
            raise ProtocolError(f"malformed {cls.__name__}: expected {len(cls.schema)} fields")
        for value, kind in zip(body, cls.schema, strict=False):
            if not isinstance(value, kind):
                raise ProtocolError(f"malformed {cls.__name__}: a field has the wrong type")
        return cls(*body[: len(cls.schema)])


EVENTS: dict[int, type[Event]] = {}  # by command code, filled as the kinds are defined
RESERVED_CODES = frozenset(range(16, 20)) | {27}  # room for ordered topics and a later transaction command


def _wire_type(annotation) -> type | tuple[type, ...]:
    """What a received field is checked against: `str | None` -> (str, NoneType), `list[int]` -> list."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return typing.get_origin(annotation) or annotation


def _register(cls: type[Event]) -> type[Event]:
    if cls.code in EVENTS or cls.code in RESERVED_CODES:
        raise ValueError(f"command code {cls.code} of {cls.__name__} is taken or reserved")
    hints = typing.get_type_hints(cls)
    cls.field_names = tuple(f.name for f in dataclasses.fields(cls))
    cls.schema = tuple(_wire_type(hints[name]) for name in cls.field_names)
    EVENTS[cls.code] = cls
    return cls


def _kind(code: int, sender: str, name: str, doc: str, **wire) -> type[Event]:
    """Define the event kind `name` with command `code`, sent by `sender`: a slotted dataclass whose fields are
    `wire` in order, each `field=type` (`str | None` where nil is allowed) or `field=(type, dataclasses.field(...))`
    for one with a default."""
    specs = [(field_name, *spec) if isinstance(spec, tuple) else (field_name, spec) for field_name, spec in wire.items()]
    namespace = {"__doc__": doc, "__module__": __name__, "code": code, "sender": sender}
    return _register(dataclasses.make_dataclass(name, specs, bases=(Event,), namespace=namespace, slots=True))


# The commands: code, who sends it, name, what it means, its fields in wire order.
Hello = _kind(1, CLIENT, "Hello", "First frame of a client: who it is and how often it will be heard from.",
              version=int, client_id=str, app_id=str, secret=str, heartbeat_ms=int,
              features=(dict, field(default_factory=dict)))
Publish = _kind(2, CLIENT, "Publish", "Store these messages (message arrays, see `message`) on the topic; answered "
                "by `Published` or `Error` with the same ref. `partition` (issue 20): the partition, whose leader "
                "takes it; nil, or absent (a client from before partitions), lets the broker choose. `remapped`: how "
                "often the producer chose this topic's partitions again after `stale_mapping` refusals; once a "
                "publish of the topic was refused `stale_mapping` on a connection, every later one there whose "
                "`remapped` is not higher is refused too (it was sent before the producer knew: storing it would put "
                "a key's later messages before the refused ones). Absent or nil: no such check.",
                ref=int, topic=str, messages=list, partition=(int | None, field(default=None)),
                remapped=(int | None, field(default=None)))
Publish.schema = Publish.schema[:3]  # partition and remapped may be absent on the wire: see `_publish_from_body`


def _publish_from_body(cls, body: Any) -> Event:
    ev = Event.from_body.__func__(cls, body)
    for at, name in ((3, "partition"), (4, "remapped")):
        if len(body) > at and body[at] is not None:
            if type(body[at]) is not int or body[at] < 0:
                raise ProtocolError(f"malformed Publish: {name} must be a non-negative integer")
            setattr(ev, name, body[at])
    return ev


def _publish_fields(self) -> list:
    fields = [self.ref, self.topic, self.messages, self.partition]
    return fields if self.remapped is None else [*fields, self.remapped]  # (absent when nil: as before it existed)


Publish.from_body = classmethod(_publish_from_body)
Publish.fields = _publish_fields
Subscribe = _kind(3, CLIENT, "Subscribe", "Receive the group's messages of the topic: `credit` unacknowledged at most "
                  "(NSQ's RDY); `ack_timeout_ms` 0 is the broker's default.",
                  ref=int, topic=str, group=str, credit=int, ack_timeout_ms=int)
Ready = _kind(4, CLIENT, "Ready", "Change the credit of a subscription.", sub_id=int, credit=int)
Ack = _kind(5, CLIENT, "Ack", "These messages of the subscription are handled.", sub_id=int, seqs=list)
Nack = _kind(6, CLIENT, "Nack", "Refuse messages: each item is [seq, delay_ms or -1 for the binding's backoff, "
             "reason].", sub_id=int, items=list)
Unsubscribe = _kind(7, CLIENT, "Unsubscribe", "End a subscription.", sub_id=int)
Ping = _kind(8, BOTH, "Ping", "Are you there? Either side asks; the other answers `Pong` (heartbeats).")
Pong = _kind(9, BOTH, "Pong", "The answer to `Ping`.")
ListDeadLetters = _kind(10, CLIENT, "ListDeadLetters", "Ask for `limit` dead letters of the group; answered by "
                        "`DeadLetters`.", ref=int, topic=str, group=str, limit=int)
Goodbye = _kind(11, BOTH, "Goodbye", "The sender will close the connection; the receiver should not expect more "
                "frames.", reason=(str, field(default="")))

# Transaction messages (codes 12-15). A producer publishes messages with FLAG_PREPARED (a Publish holds only
# prepared or only plain messages; only topics whose ZooKeeper document says "transactional": true accept
# prepared ones). It then ends each one with EndTx (commit or roll back), answered by TxEnded with the state the
# message is in now. A connection whose Hello said features={"check_listener": true} may receive CheckTx from
# the broker (a back-check) and answers TxState with the same check_id.
EndTx = _kind(12, CLIENT, "EndTx", "Commit (`commit` true) or roll back a prepared message; answered by `TxEnded` "
              "or `Error`.", ref=int, topic=str, message_id=str, commit=bool)
TxEnded = _kind(13, SERVER, "TxEnded", "The state of the message after `EndTx` `ref`: \"committed\" or "
                "\"rolled_back\". `changed` is false when it was already in a final state (then `state` is that "
                "state, maybe not the one asked).", ref=int, message_id=str, state=str, changed=bool)
CheckTx = _kind(14, SERVER, "CheckTx", "Back-check: the broker asks the producing app what became of a prepared "
                "message.", check_id=int, topic=str, message_id=str, message_type=str, key=str | None,
                business_id=str | None, headers=dict)
TxState = _kind(15, CLIENT, "TxState", "The answer to `CheckTx` `check_id`: \"commit\", \"rollback\" or "
                "\"unknown\".", check_id=int, message_id=str, state=str)

Welcome = _kind(20, SERVER, "Welcome", "The broker's answer to an accepted `Hello`.",
                version=int, node_id=str, cluster=str, heartbeat_ms=int, max_frame=int)
Published = _kind(21, SERVER, "Published", "The messages of `Publish` `ref` are stored; seqs are their positions "
                  "on this broker.", ref=int, first_seq=int, count=int)
Subscribed = _kind(22, SERVER, "Subscribed", "The subscription of `Subscribe` `ref` is open as `sub_id`.",
                   ref=int, sub_id=int, mode=str, credit=int, ack_timeout_ms=int)
Deliver = _kind(23, SERVER, "Deliver", "Messages for one subscription: each item is [seq, attempt, message array].",
                sub_id=int, items=list)


@dataclass(slots=True)
class Error(Event):
    """A refusal. `ref` names the request it answers (None: the connection); fatal: it will close. Written out
    because its error code is passed as `code`, which on an event is the command number."""

    code: ClassVar[int] = 24
    sender: ClassVar[str] = SERVER
    ref: int | None
    code_name: str  # the error code (E_*)
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


_register(Error)
DeadLetters = _kind(25, SERVER, "DeadLetters", "Dead letters of one group: each entry a dict (see "
                    "`broker_core.storage.store.DeadLetter.to_dict`).", ref=int, entries=list)
Unsubscribed = _kind(26, SERVER, "Unsubscribed", "The broker ended a subscription (its binding was removed or "
                     "changed hands).", sub_id=int, reason=str)

# Broker to broker (issue 20): a follower connects to a partition's leader with `Hello(app_id=REPLICA_APP,
# secret=<the cluster secret>)`, asks for the partition's records from a seq, stores them with the leader's seqs
# and says what it holds durably; the leader acknowledges a publish once `min_insync` replicas hold it.
ReplicaFetch = _kind(40, CLIENT, "ReplicaFetch", "Send me the partition's batches from `from_seq` on, then each new "
                     "one. `leader_epoch`: the epoch the follower follows (/partition-state); a leader of another "
                     "epoch refuses (`not_leader`), and one of an older epoch steps down (fencing). `log_epoch`: the "
                     "epoch whose leader the follower's copy came from last; a copy past the leader's epoch start "
                     "from another epoch is refused (`replica_diverged`).",
                     topic=str, partition=int, from_seq=int, leader_epoch=int, log_epoch=int)
ReplicaRecords = _kind(41, SERVER, "ReplicaRecords", "Batches of the partition's log, in seq order: each "
                       "[first_seq, app_id, received_ms, [message array, ..], [[group, ..], ..]].",
                       topic=str, partition=int, batches=list)
ReplicaStored = _kind(42, CLIENT, "ReplicaStored", "The follower holds the partition durably up to `through_seq`.",
                      topic=str, partition=int, through_seq=int)
ReplicaAcks = _kind(43, SERVER, "ReplicaAcks", "The group finished these seqs of the partition on the leader (acked, "
                    "or done with): the follower finishes them too, so a failover delivers them no more.",
                    topic=str, partition=int, group=str, seqs=list)
ReplicaLog = _kind(44, SERVER, "ReplicaLog", "One new batch as the leader's log holds it: `record` is the log record the "
                   "leader wrote (header, checksum, body [first_seq, app_id, received_ms, [message array, ..], "
                   "[[group, ..], ..]]), `count` its messages and `groups` each one's groups, so a follower appends "
                   "the record as it came without decoding its messages.",
                   topic=str, partition=int, first_seq=int, count=int, groups=list, record=bytes)

ReplicaTx = _kind(45, SERVER, "ReplicaTx", "Transaction records of the partition, in the leader's order: each "
                  "[\"prepare\", first_seq, app_id, received_ms, [message array, ..]] (prepared messages, stored with "
                  "those seqs and answered by `ReplicaStored`), or [\"end\", seq, message_id, commit, [group, ..], "
                  "now_ms, reason, number] (the prepared message at `seq` committed to those groups, or rolled back; "
                  "answered by `ReplicaTxStored` with `number` once durable, unless it is 0). An end for a message the "
                  "follower does not hold prepared is skipped.",
                  topic=str, partition=int, ops=list)
ReplicaTxStored = _kind(46, CLIENT, "ReplicaTxStored", "The follower holds the transaction end `number` durably.",
                        topic=str, partition=int, number=int)
ReplicaSchedule = _kind(47, SERVER, "ReplicaSchedule", "The schedule of a replicated topic's delayed messages, kept by "
                        "the replicas of its partition 0, in the leader's order: [\"reset\"] (empty the copy: a snapshot "
                        "follows), [\"schedule\", number, app_id, received_ms, [message array, ..]] (messages scheduled, "
                        "each due at its deliver-at field; answered by `ReplicaScheduled` with `number` once durable, "
                        "unless it is 0), [\"through\", due_ms] (every message due at or before it was delivered: "
                        "the copy drops them), [\"synced\", number] (the snapshot is complete: answered once "
                        "everything before it is durable).",
                        topic=str, partition=int, ops=list)
ReplicaScheduled = _kind(48, CLIENT, "ReplicaScheduled", "The follower holds the schedule op `number` (and every one "
                         "before it) durably.", topic=str, partition=int, number=int)

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
