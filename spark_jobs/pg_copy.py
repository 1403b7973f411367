"""Summary rows (trace_arrow.SUMMARY_SCHEMA) → `tracing_message` rows in PostgreSQL's binary COPY format.

Built column-wise with Arrow's kernels and numpy, with no Python per row or per event:

- a message's timeline and its groups become JSON text (`json_lists`): each field of each event a fragment
  `"name":value` (a null field left out of the timeline, written as null in the groups), the fragments of an
  element joined into `{…}`, a message's elements joined by commas;
- each column becomes two pieces per row, its length (4 bytes, big-endian; -1 for null) and its bytes, and
  one element-wise join of every piece of every column makes the rows: the data buffer of that join is the
  COPY stream itself.

Binary COPY spares PostgreSQL parsing CSV (every quote of the JSON doubled) and times as text. Strings
needing JSON escapes (a quote, a backslash, a control character) are rare: a byte scan of each column finds
whether there are any, and only those values are escaped, by the json module.
"""

from __future__ import annotations

import json
import queue
import struct
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.trace_arrow import GROUP_TYPE, TIMELINE_TYPE

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
TRAILER = struct.pack("!h", -1)
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01T00:00:00Z, PostgreSQL's zero time, in Unix microseconds
VARCHAR_OID = 1043
JSONB_VERSION = b"\x01"

# the columns of tracing_message, in COPY order, and how each is made from a summary row
_TEXT = ["message_id", "topic", "message_type", "key", "business_id", "cluster", "app_id", "producer_host",
         "broker"]
_TIMES = {"first_at": "first_ts_us", "last_at": "last_ts_us", "published_at": "published_ts_us",
          "stored_at": "stored_ts_us"}
MESSAGE_COLUMNS = [*_TEXT, "size", *_TIMES, "transaction_state", "final_state", "final_states", "attempts",
                   "event_count", "groups", "timeline", "indexed_at"]
_FIELD_COUNT = struct.pack("!h", len(MESSAGE_COLUMNS))


def copy_rows(summaries: pa.Table, indexed_at_us: int) -> pa.Array:
    """One binary value per row of `summaries`: the row as binary COPY writes it (its fields' count, then each
    field's length and bytes). Their concatenation, between HEADER and TRAILER, is a COPY stream."""
    pieces: list = [_FIELD_COUNT]
    for name in _TEXT:
        pieces += _text(summaries[name])
    pieces += _fixed(summaries["size"], ">i8")
    for us in _TIMES.values():
        pieces += _fixed(pc.subtract(summaries[us], PG_EPOCH_US), ">i8")
    pieces += _text(summaries["transaction_state"]) + _text(summaries["final_state"])
    pieces += _text_arrays(summaries["final_states"])
    pieces += _fixed(summaries["attempts"], ">i4") + _fixed(summaries["event_count"], ">i4")
    for column, struct_type, jsonb in (("groups", GROUP_TYPE, True), ("timeline", TIMELINE_TYPE.value_type, False)):
        head, tail = json_lists(summaries[column], struct_type, keep_nulls=jsonb)
        size = pc.add(pc.binary_length(head), pc.binary_length(tail))
        pieces += ([_lengths(size, extra=len(JSONB_VERSION)), JSONB_VERSION] if jsonb else [_lengths(size)])
        pieces += [head, tail]
    pieces += [struct.pack("!i", 8), struct.pack("!q", indexed_at_us - PG_EPOCH_US)]
    return pc.binary_join_element_wise(*[_binary(p) for p in pieces], b"")


def copy_stream(summaries: pa.Table, indexed_at_us: int, chunk_rows: int = 65536) -> Iterator[memoryview]:
    """The COPY stream of `summaries`, made `chunk_rows` rows at a time (memory stays bounded)."""
    yield memoryview(HEADER)
    for start in range(0, summaries.num_rows, chunk_rows):
        rows = copy_rows(summaries.slice(start, chunk_rows), indexed_at_us)
        yield memoryview(_data(rows))
    yield memoryview(TRAILER)


def id_stream(ids: pa.Array) -> Iterator[memoryview]:
    """A COPY stream of one varchar column (message ids)."""
    yield memoryview(HEADER)
    rows = pc.binary_join_element_wise(_binary(struct.pack("!h", 1)), *[_binary(p)
                                                                                   for p in _text(ids)], b"")
    yield memoryview(_data(rows))
    yield memoryview(TRAILER)


def ahead(chunks: Iterator[memoryview], depth: int = 2) -> Iterator[memoryview]:
    """`chunks`, made by a thread of their own up to `depth` ahead: the next chunk is encoded (Arrow's kernels
    release the GIL) while PostgreSQL reads the one before, rather than each waiting for the other."""
    made: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def make() -> None:
        try:
            for chunk in chunks:
                while not stop.is_set():
                    try:
                        made.put(chunk, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            made.put(end)
        except BaseException as exc:  # handed to the reader, which raises it
            made.put(exc)

    thread = threading.Thread(target=make, name="copy-encoder", daemon=True)
    thread.start()
    try:
        while (item := made.get()) is not end:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


class StreamReader:
    """A file-like reader over chunks of bytes (what psycopg2's copy_expert reads from)."""

    def __init__(self, chunks: Iterator[memoryview]):
        self.chunks, self.current = chunks, memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        while not len(self.current):
            chunk = next(self.chunks, None)
            if chunk is None:
                return b""
            self.current = chunk
        size = len(self.current) if size is None or size < 0 else size
        out, self.current = self.current[:size], self.current[size:]
        return bytes(out)

    readline = read


# --- JSON ---------------------------------------------------------------------------------------------------

def json_lists(lists: pa.Array, struct_type: pa.StructType, *, keep_nulls: bool) -> tuple[pa.Array, pa.Array]:
    """Each list of structs as a JSON array of objects (keys in the struct's order), in two pieces to join: all
    but its closing bracket, and that bracket. `keep_nulls`: a null field is written as null, else left out
    (then the struct's first field must never be null).

    Each object is made with the character before it (`[` when it is its list's first, else `,`), so a list's
    objects lie one after the other in the objects' data buffer: the first piece is a view of that buffer,
    with no join over the lists."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    list_offsets = np.frombuffer(lists.buffers()[1], dtype=np.int32)[lists.offset:lists.offset + len(lists) + 1]
    list_offsets = list_offsets - list_offsets[0]
    sizes = np.diff(list_offsets)
    first = np.zeros(list_offsets[-1], dtype=bool)
    first[list_offsets[:-1][sizes > 0]] = True
    objects = json_objects(lists.flatten(), struct_type, keep_nulls=keep_nulls, opener=_choice(first, b"[", b","))
    object_offsets = np.frombuffer(objects.buffers()[1], dtype=np.int32)[:len(objects) + 1]
    heads = pa.Array.from_buffers(pa.binary(), len(lists),
                                  [None, pa.py_buffer(object_offsets[list_offsets]), objects.buffers()[2]])
    return heads, _choice(sizes > 0, b"]", b"[]")


def json_objects(structs: pa.StructArray, struct_type: pa.StructType, *, keep_nulls: bool,
                 opener: pa.Array | bytes = b"") -> pa.Array:
    """Each struct as a JSON object, after `opener`: one element-wise join of every field's pieces (its key
    and quote, its value, its closing quote; pieces of a left-out null are empty)."""
    pieces: list = [opener, b"{"]
    for i, field in enumerate(struct_type):
        key = (b"," if i else b"") + json.dumps(field.name).encode() + b":"
        column = pc.struct_field(structs, field.name)
        text = pa.types.is_string(field.type)
        value = _json_escaped(column) if text else column.cast(pa.string())
        if not column.null_count:
            pieces += [key + b'"', value, b'"'] if text else [key, value]
            continue
        if not keep_nulls and i == 0:
            raise ValueError(f"{field.name}: the first field of a JSON object without nulls may not be null")
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        null = key + b"null" if keep_nulls else b""
        pieces += [_choice(valid, key + b'"', null), pc.fill_null(value, ""), _choice(valid, b'"', b"")] if text \
            else [_choice(valid, key, null), pc.fill_null(value, "")]
    pieces.append(b"}")
    return pc.binary_join_element_wise(*[_binary(p) for p in pieces], b"")


def _choice(which: np.ndarray, yes: bytes, no: bytes) -> pa.Array:
    """`yes` where `which`, else `no`, as a binary array."""
    return pa.array([yes, no], pa.binary()).take(pa.array(np.where(which, 0, 1).astype(np.int8)))


_NEEDS_ESCAPE = np.zeros(256, dtype=bool)
_NEEDS_ESCAPE[:32] = _NEEDS_ESCAPE[ord('"')] = _NEEDS_ESCAPE[ord("\\")] = True


def _json_escaped(column: pa.Array) -> pa.Array:
    """Strings as the inside of JSON strings. Most hold nothing to escape: a scan of the bytes says so."""
    data = column.buffers()[2]
    if data is None or not _NEEDS_ESCAPE[np.frombuffer(data, dtype=np.uint8)].any():
        return column
    mask = pc.fill_null(pc.match_substring_regex(column, r'[\x00-\x1f"\\]'), False)
    rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    if not len(rows):
        return column
    escaped = [json.dumps(v, ensure_ascii=False)[1:-1] for v in column.take(pa.array(rows)).to_pylist()]
    return pc.replace_with_mask(column, mask, pa.array(escaped, pa.string()))


# --- binary COPY fields -------------------------------------------------------------------------------------

def _text(column) -> list:
    """A string column: each value's length (-1 for null) and bytes."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return [_lengths(pc.binary_length(column)), pc.fill_null(column, "").cast(pa.binary())]


def _fixed(column, dtype: str) -> list:
    """An integer column as big-endian `dtype` values (int8 → bigint, int4 → integer, and timestamps)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    width = np.dtype(dtype).itemsize
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False)[valid].astype(dtype)
    lengths = np.where(valid, width, -1)
    return [_lengths_array(lengths), _from_buffers(np.where(valid, width, 0), values.tobytes())]


def _text_arrays(column) -> list:
    """A list of strings as a varchar[] (few distinct lists: each made once, in Python)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = pc.dictionary_encode(pc.binary_join(column, "\x1f"))
    made = [_varchar_array(v.split("\x1f") if v else []) for v in encoded.dictionary.to_pylist()]
    values = pa.array(made, pa.binary()).take(encoded.indices)
    return [_lengths(pc.binary_length(values)), values]


def _varchar_array(items: list[str]) -> bytes:
    if not items:
        return struct.pack("!iii", 0, 0, VARCHAR_OID)
    body = b"".join(struct.pack("!i", len(b)) + b for b in (i.encode() for i in items))
    return struct.pack("!iiiii", 1, 0, VARCHAR_OID, len(items), 1) + body


def _lengths(lengths: pa.Array, extra: int = 0) -> pa.Array:
    values = pc.fill_null(lengths, -1 - extra).to_numpy(zero_copy_only=False).astype(np.int64) + extra
    return _lengths_array(values)


def _lengths_array(lengths: np.ndarray) -> pa.Array:
    return _from_buffers(np.full(len(lengths), 4), lengths.astype(">i4").tobytes())


def _from_buffers(sizes: np.ndarray, data: bytes) -> pa.Array:
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(sizes), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _binary(piece):
    """A piece of the element-wise join: an array as binary, bytes as a scalar."""
    if isinstance(piece, bytes):
        return pa.scalar(piece, pa.binary())
    return piece if piece.type == pa.binary() else piece.cast(pa.binary())


def _data(rows: pa.Array) -> pa.Buffer:
    """The bytes of a binary array's values, in order, as one buffer (no copy when it is not sliced)."""
    if not len(rows):
        return pa.py_buffer(b"")
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int32)[rows.offset:rows.offset + len(rows) + 1]
    return rows.buffers()[2][offsets[0]:offsets[-1]]
