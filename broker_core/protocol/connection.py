"""`Connection`, one side of a connection as a state machine: bytes in, events out; events in, bytes out.

No I/O, no asyncio (the broker and the SDK both drive it).
"""

from __future__ import annotations

from typing import Any

import msgpack

from broker_core.protocol.constants import (
    CLIENT,
    DEFAULT_MAX_FRAME,
    E_TOO_LARGE,
    E_UNSUPPORTED,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    PROTOCOL_VERSION,
    SERVER,
)
from broker_core.protocol.events import EVENTS, RESERVED_CODES, Error, Event, ProtocolError, encode_frame


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()

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
