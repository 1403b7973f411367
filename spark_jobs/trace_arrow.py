"""The per-message half of the index in Arrow: whole messages' events → one summary row with its timeline each.

`summarize_table` is a pure function of one Arrow table holding every event of the messages it has (the
index's shuffle by message id, in `trace_transforms.summarize`, gives each task such a table). It works
column-wise with Arrow's and numpy's kernels: one sort, then segment and hash aggregations; no Python per
row or per message. What it computes is defined in docs/trace-events.md ("The index"):

  timeline    the message's events, each once (copies share group and event id), ordered by
              (ts_us, rank, event_id, group; no group first)
  summary     message fields (the max over its events: a field only the published event has is taken from
              it), first/last time, when published (the first published/prepared step) and stored, the
              producing app, host and broker, size, transaction state; per group (sorted by name) its state,
              attempts, deliveries, nacks, timeouts, first delivery, end, latency, last consumer and detail;
              the message's final states and its final state (STATE_PRECEDENCE), total deliveries, date.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.tracing.schema import event_schema

# Order of kinds recorded in the same microsecond: the order in which they happen to one message.
EVENT_RANK = {
    "published": 0, "prepared": 1, "stored": 2, "committed": 3, "rolled_back": 4, "delivered": 5,
    "nacked": 6, "timed_out": 7, "acked": 8, "dead_lettered": 9, "expired": 10, "redriven": 11,
}
# What a message is as a whole: the worst state of its groups comes first.
STATE_PRECEDENCE = ("rolled_back", "dead_lettered", "expired", "retrying", "in_flight", "pending", "acked",
                    "prepared", "stored", "published")
RANK_BITS = 16  # an event's place as one number: ts_us * RANK_BITS + rank
KINDS = np.array(sorted(EVENT_RANK, key=EVENT_RANK.get), dtype=object)  # kind by rank
R = EVENT_RANK
TERMINAL = np.array([R["acked"], R["dead_lettered"], R["expired"]])
DECISIVE = np.array([*TERMINAL, R["redriven"]])
ACTIVE = np.array([R["delivered"], R["nacked"], R["timed_out"]])
PRODUCED = np.array([R["published"], R["prepared"]])
TRANSACTION = np.array([R["prepared"], R["committed"], R["rolled_back"]])
STATES = sorted(STATE_PRECEDENCE)  # final_states lists them in this (alphabetical) order

MESSAGE_FIELDS = ["topic", "message_type", "key", "business_id", "cluster"]
TIMELINE_FIELDS = ["ts_us", "rank", "event_id", "group", "event", "attempt", "consumer", "client_host", "broker",
                   "app_id", "detail", "size"]

_s, _i, _l = pa.string(), pa.int32(), pa.int64()
TIMELINE_TYPE = pa.list_(pa.struct([(f, {"ts_us": _l, "rank": _i, "attempt": _i, "size": _l}.get(f, _s))
                                    for f in TIMELINE_FIELDS]))
GROUP_TYPE = pa.struct([("group", _s), ("state", _s), ("attempts", _i), ("deliveries", _i), ("nacks", _i),
                        ("timeouts", _i), ("first_delivered_us", _l), ("ended_us", _l), ("latency_us", _l),
                        ("last_consumer", _s), ("detail", _s)])
SUMMARY_SCHEMA = pa.schema([
    ("message_id", _s), ("topic", _s), ("message_type", _s), ("key", _s), ("business_id", _s), ("cluster", _s),
    ("app_id", _s), ("producer_host", _s), ("broker", _s), ("size", _l), ("first_ts_us", _l), ("last_ts_us", _l),
    ("published_ts_us", _l), ("stored_ts_us", _l), ("transaction_state", _s), ("final_state", _s),
    ("final_states", pa.list_(_s)), ("attempts", _i), ("event_count", _i), ("groups", pa.list_(GROUP_TYPE)),
    ("date", _s), ("timeline", TIMELINE_TYPE),
])


# the columns of a clean event (trace_transforms.EVENT_COLUMNS without `date`)
EVENT_FIELDS = ["event_id", "ts_us", "rank", "event", "group", "attempt", "consumer", "client_host", "broker",
                "app_id", "detail", "size"]
CLEAN_COLUMNS = ["message_id", *MESSAGE_FIELDS, *EVENT_FIELDS]
RAW_SCHEMA = event_schema()
CLEAN_SCHEMA = pa.schema([(c, _i if c == "rank" else RAW_SCHEMA.field(c).type) for c in CLEAN_COLUMNS])
_REQUIRED = ("event_id", "message_id", "ts_us", "topic")


def clean_table(raw: pa.Table) -> pa.Table:
    """Events of a trace file (RAW_SCHEMA) → the well-formed ones of known kinds, with their rank
    (CLEAN_SCHEMA): lines without an event id, message id, time or topic, or of an unknown kind, are dropped."""
    rank = pc.index_in(raw["event"], value_set=pa.array(list(EVENT_RANK), _s))
    keep = pc.is_valid(rank)
    for column in _REQUIRED:
        keep = pc.and_(keep, pc.is_valid(raw[column]))
    raw = raw.append_column("rank", rank.cast(_i))
    return raw.filter(keep).select(CLEAN_COLUMNS).cast(CLEAN_SCHEMA)


def buckets(message_ids, count: int) -> np.ndarray:
    """Each event's bucket 0..count-1 by its message id (crc32: the same in every task, run and machine, so
    all events of a message, from any file, share a bucket)."""
    encoded = pc.dictionary_encode(message_ids)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
    ids = encoded.dictionary.cast(pa.binary()).to_pylist()
    hashes = np.fromiter(map(zlib.crc32, ids), dtype=np.int64, count=len(ids))
    return (hashes % count)[encoded.indices.to_numpy()]


def split_by_bucket(events: pa.Table, count: int) -> list[tuple[int, pa.Table]]:
    """`events` cut into their buckets (only the buckets that have events), each a whole set of messages."""
    if events.num_rows == 0:
        return []
    bucket = buckets(events["message_id"], count)
    sizes = np.bincount(bucket, minlength=count)
    ordered = events.take(pa.array(np.argsort(bucket, kind="stable")))
    starts = np.r_[0, np.cumsum(sizes)]
    return [(b, ordered.slice(starts[b], sizes[b])) for b in range(count) if sizes[b]]


def to_ipc(table: pa.Table) -> bytes:
    """`table` as an Arrow IPC stream, LZ4-compressed (a blob crosses the shuffle as one opaque value)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def summarize_table(events: pa.Table) -> pa.Table:
    """Summary rows (SUMMARY_SCHEMA) of the messages in `events`: cleaned events (clean_events' columns,
    `date` not needed) holding every event of each of their messages."""
    if events.num_rows == 0:
        return SUMMARY_SCHEMA.empty_table()
    events = events.combine_chunks()
    encoded = pc.dictionary_encode(events["message_id"]).combine_chunks()
    events = timeline_order(events.append_column("_m", encoded.indices))
    m = events["_m"].to_numpy()
    starts = np.flatnonzero(np.r_[True, m[1:] != m[:-1]])
    offsets = np.r_[starts, len(m)].astype(np.int32)
    rank = events["rank"].to_numpy()
    ts = events["ts_us"].to_numpy()
    key = ts * RANK_BITS + rank

    seg = Segments(starts)
    produced, stored = np.isin(rank, PRODUCED), rank == R["stored"]
    produced_key, has_produced = seg.min(key, produced)
    published = pa.array(produced_key // RANK_BITS, _l, mask=~has_produced)
    stored_ts, has_stored = seg.min(ts, stored)
    tx_key, has_tx = seg.max(key, np.isin(rank, TRANSACTION))
    size, size_valid = _ints(events["size"])
    size, has_size = seg.max(size, size_valid & produced)
    app, host, broker = (events[c].combine_chunks() for c in ("app_id", "client_host", "broker"))
    groups, states, deliveries = _groups(events, m, starts, rank, ts, key, published)

    tx_rank = np.where(has_tx, tx_key % RANK_BITS, -1)
    own_state = np.where(tx_rank == R["rolled_back"], STATES.index("rolled_back"),
                         np.where(tx_rank == R["prepared"], STATES.index("prepared"),
                                  np.where(has_stored, STATES.index("stored"), STATES.index("published"))))
    no_groups = np.flatnonzero(~states.any(axis=1))
    states[no_groups, own_state[no_groups]] = True
    _rows, cols = np.nonzero(states)
    final_states = pa.ListArray.from_arrays(
        pa.array(np.r_[0, np.cumsum(states.sum(axis=1))].astype(np.int32)),
        pa.array(np.array(STATES, dtype=object)[cols], _s))
    final_state = np.full(len(starts), None, dtype=object)
    for state in reversed(STATE_PRECEDENCE):
        final_state[states[:, STATES.index(state)]] = state
    first_ts = ts[starts]
    timeline = pa.ListArray.from_arrays(pa.array(offsets), pa.StructArray.from_arrays(
        [events[f].combine_chunks().cast(TIMELINE_TYPE.value_type.field(f).type) for f in TIMELINE_FIELDS],
        fields=list(TIMELINE_TYPE.value_type)))
    columns = {
        "message_id": encoded.dictionary.take(pa.array(m[starts])),
        **{f: seg.max_string(events[f].combine_chunks()) for f in MESSAGE_FIELDS},
        "app_id": pc.coalesce(seg.max_string(app, produced), seg.max_string(app)),
        "producer_host": seg.max_string(host, produced),
        "broker": pc.coalesce(seg.max_string(broker, produced), seg.max_string(broker, stored)),
        "size": pa.array(size, _l, mask=~has_size),
        "first_ts_us": pa.array(first_ts, _l),
        "last_ts_us": pa.array(ts[offsets[1:] - 1], _l),
        "published_ts_us": published,
        "stored_ts_us": pa.array(stored_ts, _l, mask=~has_stored),
        "transaction_state": pa.array(np.where(has_tx, KINDS[np.maximum(tx_rank, 0)], None), _s),
        "final_state": pa.array(final_state, _s),
        "final_states": final_states,
        "attempts": pa.array(deliveries, _i),
        "event_count": pa.array(np.diff(offsets), _i),
        "groups": groups,
        "date": _dates(first_ts),
        "timeline": timeline,
    }
    return pa.Table.from_arrays([columns[f.name] for f in SUMMARY_SCHEMA], schema=SUMMARY_SCHEMA)


def timeline_order(events: pa.Table) -> pa.Table:
    """`events` sorted by (message, ts_us, rank, event_id, group) with copies of an event dropped."""
    order = pc.sort_indices(events, sort_keys=[("_m", "ascending", "at_start"), ("ts_us", "ascending", "at_start"),
                                               ("rank", "ascending", "at_start"),
                                               ("event_id", "ascending", "at_start"),
                                               ("group", "ascending", "at_start")])
    events = events.take(order)
    n = events.num_rows
    if n < 2:
        return events
    head, tail = (lambda c: c.slice(0, n - 1)), (lambda c: c.slice(1))
    group = events["group"]
    same_group = pc.or_(pc.fill_null(pc.equal(head(group), tail(group)), False),
                        pc.and_(pc.is_null(head(group)), pc.is_null(tail(group))))
    copy = pc.and_(pc.and_(pc.equal(head(events["_m"]), tail(events["_m"])),
                           pc.equal(head(events["event_id"]), tail(events["event_id"]))), same_group)
    if not pc.any(copy).as_py():
        return events
    return events.filter(pa.concat_arrays([pa.array([True]), pc.invert(copy).combine_chunks()]))


class Segments:
    """Runs of consecutive rows (a message's events, a group's steps), each starting at `starts`, and
    reductions over each run with numpy (`where` picks the rows that count; a run with none is not valid)."""

    def __init__(self, starts: np.ndarray):
        self.starts = starts

    def max(self, values: np.ndarray, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (np.maximum.reduceat(np.where(where, values, _MIN64), self.starts),
                np.logical_or.reduceat(where, self.starts))

    def min(self, values: np.ndarray, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (np.minimum.reduceat(np.where(where, values, _MAX64), self.starts),
                np.logical_or.reduceat(where, self.starts))

    def count(self, where: np.ndarray) -> np.ndarray:
        return np.add.reduceat(where.astype(np.int64), self.starts)

    def last(self, column: pa.Array) -> pa.Array:
        """The last non-null value of each run."""
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        index = np.maximum.reduceat(np.where(valid, np.arange(len(column)), -1), self.starts)
        return column.take(pa.array(index, mask=index < 0))

    def max_string(self, column: pa.Array, where: np.ndarray | None = None) -> pa.Array:
        """The greatest string (by bytes, as Spark's max) of each run; null where the run has none."""
        encoded = pc.dictionary_encode(column)
        dictionary = encoded.dictionary
        if len(dictionary) == 0:
            return pa.nulls(len(self.starts), _s)
        order = pc.sort_indices(dictionary).to_numpy()
        rank_of = np.empty(len(order), np.int64)
        rank_of[order] = np.arange(len(order))
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        valid = codes >= 0 if where is None else (codes >= 0) & where
        best = np.maximum.reduceat(np.where(valid, rank_of[np.maximum(codes, 0)], -1), self.starts)
        return dictionary.take(pa.array(order)).take(pa.array(best, mask=best < 0))


_MIN64, _MAX64 = np.iinfo(np.int64).min, np.iinfo(np.int64).max
_STATE = {name: i for i, name in enumerate(STATES)}
# a terminal step's state (by rank); -1 for the others
_TERMINAL_STATE = np.array([_STATE.get(kind, -1) for kind in KINDS])


def _dates(ts_us: np.ndarray) -> pa.Array:
    """The UTC date (yyyy-MM-dd) of each microsecond time."""
    days, where = np.unique(np.floor_divide(ts_us, 86_400_000_000), return_inverse=True)
    return pa.array(days.astype("datetime64[D]").astype(str).astype(object)[where], _s)


def _ints(array) -> tuple[np.ndarray, np.ndarray]:
    """An int64 array's values (0 where null) and where they are valid. (numpy's view of an array with
    nulls is float64, which cannot hold a microsecond key exactly.)"""
    return (pc.fill_null(array, 0).to_numpy(zero_copy_only=False).astype(np.int64),
            array.is_valid().to_numpy(zero_copy_only=False))


def _groups(events: pa.Table, m, starts, rank, ts, key, published: pa.Array):
    """Per message: its groups' summaries (a list array, groups by name), which states its groups are in (a
    boolean matrix, columns STATES) and its deliveries in all."""
    n_messages = len(starts)
    states = np.zeros((n_messages, len(STATES)), dtype=bool)
    has_group = events["group"].is_valid().to_numpy(zero_copy_only=False)
    if not has_group.any():
        empty = pa.ListArray.from_arrays(pa.array(np.zeros(n_messages + 1, np.int32)), pa.array([], GROUP_TYPE))
        return empty, states, np.zeros(n_messages, np.int64)
    # the steps of each (message, group) together, groups by name, each group's steps still in timeline order
    message_of_row = np.repeat(np.arange(n_messages), np.diff(np.r_[starts, len(m)]))
    rows = np.flatnonzero(has_group)
    names = pc.dictionary_encode(events["group"].combine_chunks().take(pa.array(rows)))
    name_order = pc.sort_indices(names.dictionary).to_numpy()
    name_rank = np.empty(len(name_order), np.int64)
    name_rank[name_order] = np.arange(len(name_order))
    by_group = message_of_row[rows] * len(name_order) + name_rank[names.indices.to_numpy()]
    order = np.argsort(by_group, kind="stable")
    rows, by_group = rows[order], by_group[order]
    group_starts = np.flatnonzero(np.r_[True, by_group[1:] != by_group[:-1]])
    seg = Segments(group_starts)
    g_rank, g_key, take = rank[rows], key[rows], pa.array(rows)

    d, d_valid = seg.max(g_key, np.isin(g_rank, DECISIVE))
    a, a_valid = seg.max(g_key, np.isin(g_rank, ACTIVE))
    attempt, attempt_valid = _ints(events["attempt"].combine_chunks().take(take))
    attempts, _ = seg.max(attempt, attempt_valid)
    delivered = g_rank == R["delivered"]
    first_delivered, has_delivery = seg.min(ts[rows], delivered)
    deliveries = seg.count(delivered)
    terminal = d_valid & np.isin(d % RANK_BITS, TERMINAL)
    live = a_valid & (~d_valid | (a > d))
    state = np.where(terminal, _TERMINAL_STATE[d % RANK_BITS],
                     np.where(live, np.where(a % RANK_BITS == R["delivered"], _STATE["in_flight"], _STATE["retrying"]),
                              _STATE["pending"]))
    position = message_of_row[rows[group_starts]]
    published_us, p_valid = (values[position] for values in _ints(published))
    ended = d // RANK_BITS
    group_rows = pa.StructArray.from_arrays([
        names.dictionary.take(pa.array(name_order)).take(pa.array(by_group[group_starts] % len(name_order))),
        pa.array(np.array(STATES, dtype=object)[state], _s),
        pa.array(np.maximum(attempts, 0), _i), pa.array(deliveries, _i),
        pa.array(seg.count(g_rank == R["nacked"]), _i), pa.array(seg.count(g_rank == R["timed_out"]), _i),
        pa.array(first_delivered, _l, mask=~has_delivery),
        pa.array(ended, _l, mask=~terminal),
        pa.array(ended - published_us, _l, mask=~(terminal & p_valid)),
        seg.last(events["consumer"].combine_chunks().take(take)), seg.last(events["detail"].combine_chunks().take(take)),
    ], fields=list(GROUP_TYPE))
    counts = np.bincount(position, minlength=n_messages)
    groups = pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(counts)].astype(np.int32)), group_rows)
    states[position, state] = True
    return groups, states, np.bincount(position, weights=deliveries, minlength=n_messages).astype(np.int64)
