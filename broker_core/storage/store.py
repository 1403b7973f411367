"""What a topic's storage must do, the stored message, and the record format shared by the stores.

A store keeps one topic's messages and, per message, which bound groups have finished with it
(acked or dead-lettered). It knows nothing of the network or of the event loop: work that must
happen off the caller's thread runs in the executor it is given, and completions are handed back
through the `notify` callable (the broker passes `loop.call_soon_threadsafe`).

Record framing (file store, all files): `length u32 | crc32 u32 | kind u8 | payload`, big-endian;
`length` counts the payload, the CRC covers kind and payload. Payloads are msgpack arrays:

    KIND_BATCH    [first_seq, app_id, received_ms, [message array, ...], [[group, ...], ...]]
    KIND_FINISH   [group, [seq, ...]]            (the ack file: these seqs are done for the group)
    KIND_DEAD     [seq, group, cause, attempts, dead_ms, app_id, received_ms, message array]

Transaction messages (a topic's log; commit and rollback records go to the log of the segment that
holds the prepared message, so they live and die with it):

    KIND_PREPARED [first_seq, app_id, received_ms, [message array, ...]]   stored, owed to no group yet
    KIND_COMMIT   [seq, message_id, [group, ...], committed_ms, reason]     now owed to these groups
    KIND_ROLLBACK [seq, message_id, rolled_back_ms, reason]                never delivered

Dead-letter re-drive:

    KIND_REDRIVE  [first_seq, received_ms, group, [[dead_seq, app_id, message array], ...]]
                  (a topic's log: fresh copies of dead letters, owed to that group only)
    KIND_REDRIVEN [dead_seq, new_seq, redriven_ms]
                  (the group's .dlq file: that dead letter was re-driven; written once the log
                  record is durable, and written again at recovery if a crash came in between)

Dead-letter delete (the admin API's `POST /admin/dlq/delete`):

    KIND_DEAD_DELETED [dead_seq, deleted_ms]
                  (the group's .dlq file: that dead letter was deleted; never listed again)

A message array is `broker_core.protocol.message`, as the producer sent it.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import msgpack

from broker_core.protocol import (
    M_BODY,
    M_BUSINESS_ID,
    M_DELIVERY_LIMIT,
    M_HEADERS,
    M_ID,
    M_KEY,
    M_TTL_MS,
    M_TYPE,
    TX_PREPARED,
)

KIND_BATCH = 1
KIND_PREPARED, KIND_COMMIT, KIND_ROLLBACK = 2, 3, 4
KIND_FINISH = 16
KIND_REDRIVE = 17
KIND_DEAD = 32
KIND_REDRIVEN = 33
KIND_DEAD_DELETED = 34

RECORD_HEADER = struct.Struct(">IIB")
MAX_RECORD = 256 * 1024 * 1024


class StoreError(Exception):
    """The store could not make a record durable; the publish that asked for it has failed."""


class StoredMessage:
    """One message as the broker holds it between publish and the last group finishing with it."""

    __slots__ = ("seq", "fields", "received_ms", "app_id", "groups", "pending", "segment")

    def __init__(self, seq: int, fields: list, app_id: str | None, received_ms: int, groups: tuple[str, ...],
                 segment=None):
        self.seq = seq
        self.fields = fields  # the message array as the producer sent it (protocol.message)
        self.received_ms = received_ms
        self.app_id = app_id
        self.groups = groups  # the groups bound when it was published: it is owed to each of them
        self.pending = len(groups)  # groups not yet finished with it (kept up to date by the groups)
        self.segment = segment  # the store's handle for where it lives

    @property
    def ttl_ms(self) -> int:
        return self.fields[M_TTL_MS]

    @property
    def delivery_limit(self) -> int:
        return self.fields[M_DELIVERY_LIMIT]

    @property
    def id(self) -> str:
        return self.fields[M_ID]

    @property
    def message_type(self) -> str:
        return self.fields[M_TYPE]

    @property
    def key(self) -> str | None:
        return self.fields[M_KEY]

    @property
    def business_id(self) -> str | None:
        return self.fields[M_BUSINESS_ID]

    @property
    def size(self) -> int:
        return len(self.fields[M_BODY])

    def __repr__(self) -> str:
        return f"<StoredMessage seq={self.seq} id={self.id} type={self.message_type!r}>"


@dataclass
class DeadLetter:
    seq: int
    group: str
    cause: str
    attempts: int
    dead_ms: int
    app_id: str | None
    received_ms: int
    fields: list

    def to_dict(self) -> dict:
        """The JSON-able view (body as bytes: the HTTP layer encodes it)."""
        m = self.fields
        return {
            "seq": self.seq, "group": self.group, "cause": self.cause, "attempts": self.attempts,
            "dead_ms": self.dead_ms, "app_id": self.app_id, "received_ms": self.received_ms,
            "message_id": m[M_ID], "message_type": m[M_TYPE], "key": m[M_KEY], "business_id": m[M_BUSINESS_ID],
            "headers": m[M_HEADERS], "body": m[M_BODY],
        }

    def to_record(self) -> bytes:
        return encode_record(KIND_DEAD, [self.seq, self.group, self.cause, self.attempts, self.dead_ms,
                                         self.app_id, self.received_ms, self.fields])

    @classmethod
    def from_payload(cls, p: list) -> DeadLetter:
        return cls(*p[:8])


class TxEntry:
    """A transaction message on this broker: its stored message and where it stands.

    `conn_no` names the connection that published it (in memory only: the preferred target of a
    back-check while it stays connected)."""

    __slots__ = ("message", "state", "resolved_ms", "reason", "conn_no")

    def __init__(self, message: StoredMessage, state: str = TX_PREPARED, conn_no: int = 0):
        self.message = message
        self.state = state
        self.resolved_ms = 0
        self.reason = ""
        self.conn_no = conn_no

    @property
    def prepared_ms(self) -> int:
        return self.message.received_ms


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters a listing wants: dead_ms in [since_ms, until_ms), and exact message type, key and
    business id when given (None: any)."""

    since_ms: int | None = None
    until_ms: int | None = None
    message_type: str | None = None
    key: str | None = None
    business_id: str | None = None

    def __call__(self, d: DeadLetter) -> bool:
        f = d.fields
        return ((self.since_ms is None or d.dead_ms >= self.since_ms)
                and (self.until_ms is None or d.dead_ms < self.until_ms)
                and (self.message_type is None or f[M_TYPE] == self.message_type)
                and (self.key is None or f[M_KEY] == self.key)
                and (self.business_id is None or f[M_BUSINESS_ID] == self.business_id))


class DeadLetterIndex:
    """The dead letters of a store's groups that were neither re-driven nor deleted, by group and seq (what
    the admin API lists, counts and re-drives), the re-driven ones (seq -> message id) and the deleted ones
    (seq -> message id). The file store keeps the live ones without their bodies."""

    def __init__(self) -> None:
        self.live: dict[str, dict[int, DeadLetter]] = {}
        self.redriven: dict[str, dict[int, str]] = {}
        self.deleted: dict[str, dict[int, str]] = {}

    def add(self, dead: DeadLetter) -> None:
        if dead.seq not in self.redriven.get(dead.group, ()) and dead.seq not in self.deleted.get(dead.group, ()):
            self.live.setdefault(dead.group, {})[dead.seq] = dead

    def mark_redriven(self, group: str, dead_seq: int, message_id: str) -> None:
        self.redriven.setdefault(group, {})[dead_seq] = message_id
        self.live.get(group, {}).pop(dead_seq, None)

    def mark_deleted(self, group: str, dead_seq: int, message_id: str) -> None:
        self.deleted.setdefault(group, {})[dead_seq] = message_id
        self.live.get(group, {}).pop(dead_seq, None)

    def drop(self, group: str) -> None:
        for kept in (self.live, self.redriven, self.deleted):
            kept.pop(group, None)

    def count(self, group: str) -> int:
        return len(self.live.get(group, ()))

    def page(self, group: str, since_ms: int | None, until_ms: int | None, after: tuple[int, str] | None,
             limit: int) -> list[DeadLetter]:
        """Live dead letters ordered by (dead_ms, message_id), dead_ms in [since, until), after a cursor."""
        return self.matching(group, DeadLetterFilter(since_ms, until_ms), after)[:limit]

    def matching(self, group: str, wanted: DeadLetterFilter, after: tuple[int, str] | None = None) -> list[DeadLetter]:
        """Every live dead letter the filter takes, ordered by (dead_ms, message_id), after a cursor."""
        out = [d for d in self.live.get(group, {}).values()
               if wanted(d) and (after is None or (d.dead_ms, d.fields[M_ID]) > after)]
        out.sort(key=lambda d: (d.dead_ms, d.fields[M_ID], d.seq))
        return out

    def by_message_id(self, group: str, message_ids) -> dict[str, list[DeadLetter]]:
        wanted = set(message_ids)
        found: dict[str, list[DeadLetter]] = {}
        for d in self.live.get(group, {}).values():
            if d.fields[M_ID] in wanted:
                found.setdefault(d.fields[M_ID], []).append(d)
        return found

    def redriven_ids(self, group: str) -> set[str]:
        return set(self.redriven.get(group, {}).values())

    def deleted_ids(self, group: str) -> set[str]:
        return set(self.deleted.get(group, {}).values())


# A publish's completion: called on the owner's thread with the exception, or None when durable.
DoneCallback = Callable[[BaseException | None], None]


class TopicStore(Protocol):
    """Storage of one topic (nsqd's BackendQueue, plus per-group delivery state)."""

    durable: bool
    # the encoded record of the last `append` as it goes to the log (None if it failed, or for a level that
    # encodes none): a partition's leader sends it to its followers as it is (replication/leader.py)
    last_batch: bytes | None

    def recover(self) -> list[tuple[StoredMessage, tuple[str, ...]]]:
        """Messages some group has not finished with, in seq order, each with those groups."""
        ...

    def append(self, app_id: str | None, received_ms: int, arrays: list[list], groups: list[tuple[str, ...]],
               on_done: DoneCallback) -> list[StoredMessage]:
        """Assign seqs and store a publish batch: message arrays, and for each the groups it is owed to.

        Returns the messages at once; `on_done` runs once they are durable under the fsync policy.
        """
        ...

    def finish(self, message: StoredMessage, group: str) -> None:
        """The group is done with the message (acked). Need not be durable at once: losing it in a
        crash means one more delivery, never a lost message."""
        ...

    def finish_many(self, messages: list[StoredMessage], group: str) -> None:
        """`finish` for many messages of one group (an ack frame)."""
        ...

    def dead_letter(self, message: StoredMessage, group: str, cause: str, attempts: int, now_ms: int,
                    finish: bool = True) -> None:
        """Copy the message to the group's dead-letter queue, then (if `finish`) finish it for the group.
        The copy is durable before the finish can be."""
        ...

    def dead_letters(self, group: str, limit: int) -> list[DeadLetter]:
        """The group's dead letters not re-driven, oldest first, with their bodies."""
        ...

    def dead_letter_count(self, group: str) -> int:
        """Dead letters of the group not re-driven."""
        ...

    # -- transaction messages (issue 5) ------------------------------------------------------

    tx: dict[str, TxEntry]  # every transaction message this store holds, by message id
    prepared: dict[str, TxEntry]  # those still prepared

    def prepare(self, app_id: str | None, received_ms: int, arrays: list[list], conn_no: int,
                on_done: DoneCallback) -> list[StoredMessage]:
        """Store prepared messages (owed to no group); `on_done` once durable."""
        ...

    def end_tx(self, entry: TxEntry, commit: bool, groups: tuple[str, ...], now_ms: int, reason: str,
               on_done: DoneCallback) -> None:
        """Commit (the message becomes owed to `groups`) or roll back a prepared message; the entry's
        state changes at once, `on_done` runs once the record is durable."""
        ...

    # -- dead-letter re-drive ------------------------------------------------------------------

    dead_index: DeadLetterIndex

    def redrive(self, group: str, dead: list[DeadLetter], received_ms: int, on_done: DoneCallback,
                superseded: list[DeadLetter] = ()) -> list[StoredMessage]:
        """Store fresh copies of these dead letters owed to `group` only, and mark them re-driven
        (durably, exactly once across restarts). `dead` must hold the bodies (`dead_letter_bodies`).
        `superseded` dead letters are marked re-driven without a copy (older copies of the same ids)."""
        ...

    def dead_letter_bodies(self, group: str, dead: list[DeadLetter]) -> list[DeadLetter]:
        """The same dead letters with their message bodies."""
        ...

    def drop_dead_letters(self, group: str) -> None:
        """Delete the group's dead letters (its binding was removed), re-driven ones' markers too."""
        ...

    def import_dead_letters(self, group: str, dead: list[DeadLetter], on_done: DoneCallback) -> None:
        """Store dead letters brought from another broker (with bodies) as the group's; each gets a seq of this
        store (set on it). `on_done` once they are durable."""
        ...

    def delete_dead_letters(self, group: str, dead: list[DeadLetter], on_done: DoneCallback) -> None:
        """Delete these dead letters of the group (never listed again, after a restart too); `on_done` once
        that is durable."""
        ...

    def sync_finishes(self, on_done: DoneCallback) -> None:
        """`on_done` once every finish recorded so far is durable (a group's position reset waits for it)."""
        ...

    # -- life of the topic on this broker ----------------------------------------------------

    held: int  # messages some group still owes (the backlog, in flight or waiting), each counted once

    @property
    def idle(self) -> bool:
        """Nothing is being written or waits to be made durable."""
        ...

    def discard(self) -> None:
        """The topic was deleted: drop what is buffered (its callbacks get an error), write nothing more, close
        the files as soon as no write runs. The caller deletes the data."""
        ...

    def tick(self, now: float) -> None:
        """Called a few times a second: flush buffered state, fsync on the interval policy."""
        ...

    def stats(self) -> dict: ...

    def close(self) -> None: ...


_packers = threading.local()


def encode_record(kind: int, payload: list) -> bytes:
    # one Packer per thread, kept: its buffer stays as large as the largest record so far, where
    # msgpack.packb starts a new one each time and grows it by realloc, which copies a batch-sized
    # buffer whenever the heap cannot extend it in place (often, with a trace sink's allocations about)
    packer = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    body = packer.pack(payload)
    crc = zlib.crc32(body, zlib.crc32(bytes((kind,))))
    return RECORD_HEADER.pack(len(body), crc, kind) + body


def batch_record_seq(record: bytes) -> int | None:
    """The first seq of one whole, intact batch record as `encode_record(KIND_BATCH, ...)` made it (a replica
    copies the leader's record verbatim); None if it is anything else: torn, corrupt, or another kind."""
    if len(record) < RECORD_HEADER.size:
        return None
    length, crc, kind = RECORD_HEADER.unpack_from(record)
    body = memoryview(record)[RECORD_HEADER.size:]
    if kind != KIND_BATCH or length != len(body) or zlib.crc32(body, zlib.crc32(bytes((kind,)))) != crc:
        return None
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(body[:16])  # the array header and the first seq (at most 1 + 9 bytes)
    try:
        if unpacker.read_array_header() < 5:
            return None
        seq = unpacker.unpack()
    except Exception:
        return None
    return seq if type(seq) is int else None


def scan_records(data: bytes) -> tuple[list[tuple[int, list]], int]:
    """The intact records of a record file as (kind, payload), and the length of the intact prefix.

    Scanning stops at the first torn or corrupt record; the caller truncates the file to the
    returned length when it is shorter than the data.
    """
    view = memoryview(data)
    pos, size = 0, len(data)
    records: list[tuple[int, list]] = []
    while pos + RECORD_HEADER.size <= size:
        length, crc, kind = RECORD_HEADER.unpack_from(view, pos)
        end = pos + RECORD_HEADER.size + length
        if length > MAX_RECORD or end > size:
            break
        body = view[pos + RECORD_HEADER.size:end]
        if zlib.crc32(body, zlib.crc32(bytes((kind,)))) != crc:
            break
        try:
            payload = msgpack.unpackb(body, raw=False, use_list=True)
        except Exception:  # a checksum collision on garbage; treat as corrupt
            break
        records.append((kind, payload))
        pos = end
    return records, pos
