"""What the broker ships to its trace process and what comes out: a batch of records (a row per publish
batch or frame, its messages' values as lists), records naming the messages of earlier records (a
publish batch's `stored` its `published` record, a delivery or ack frame runs of published records, in
the same batch or the one before), the open file, and a real broker's rows for every step of a batch."""

from __future__ import annotations

import asyncio

import pyarrow as pa

from broker_core.client import Consumer, Message, Producer
from broker_core.storage.store import StoredMessage
from broker_core.tracing.process import ProcessTraceSink
from broker_core.tracing.records import NAMEABLE_TAKES, RecordBuffer, pack, read_parts, to_batch, unpack
from broker_core.tracing.schema import read_events, read_trace_events
from broker_core.tracing.values import Joined, Run, joined, run
from broker_core.tracing.writer import FILE_FORMAT, TraceFileWriter
from tests.broker.conftest import APP, wait_for
from tests.broker.helpers import Received


def _message(seq, message_id, body=b"12345", message_type="normal", key=None, business_id=None):
    return StoredMessage(seq, [message_id, message_type, key, business_id, {}, body, 0, 0, 0, 0], "shop", 0, ("g",))


def _rows(folder):
    rows = read_trace_events(folder)
    for r in rows:
        assert len(r.pop("event_id")) == 32
    return rows


def _runs(*runs):
    return [{"record": r, "offset": o, "count": c} for r, o, c in runs]


def _column(batch, name):
    return batch.column(name).to_pylist()


def _written(tmp_path, *chunks, **writer_options):
    writer = TraceFileWriter(tmp_path, node_id="n1", cluster="c", **writer_options)
    for chunk in chunks:
        writer.write(chunk)
    writer.close()
    return writer


def test_a_stored_record_naming_a_published_one_of_the_chunk_before_gets_its_fields(tmp_path):
    batch = [_message(1, "m-1", key="k1", business_id="b1", message_type="order.created"),
             _message(2, "m-22", body=b"1234567", business_id="b2")]
    shipper = RecordBuffer()
    handle = shipper.emit_messages("published", "orders", batch, app_id="shop", client_host="h:1", ts_us=100)
    published = shipper.take()
    shipper.emit_messages("stored", "orders", batch, app_id="shop", client_host="h:1", ts_us=150, same_as=handle)
    stored = shipper.take()
    assert _column(stored, "refs") == [_runs((0, 0, 2))]  # names record 0, no values of its own
    assert [_column(stored, c) for c in ("message_id", "message_type", "key", "business_id")] == [[None]] * 4
    writer = TraceFileWriter(tmp_path, node_id="n1", cluster="c")
    writer.write(published)
    writer.write(stored)
    writer.close()
    common = {"v": 1, "topic": "orders", "cluster": "c", "broker": "n1", "app_id": "shop", "client_host": "h:1"}
    m1 = {"message_id": "m-1", "message_type": "order.created", "key": "k1", "business_id": "b1"}
    m2 = {"message_id": "m-22", "message_type": "normal", "business_id": "b2"}
    assert _rows(tmp_path) == [
        {**common, **m1, "event": "published", "ts_us": 100, "size": 5},
        {**common, **m2, "event": "published", "ts_us": 100, "size": 7},
        {**common, **m1, "event": "stored", "ts_us": 150},
        {**common, **m2, "event": "stored", "ts_us": 150},
    ]
    assert writer.dropped == 0


def test_a_handle_older_than_the_nameable_batches_is_not_named(tmp_path):
    """A record names records of its own batch and of the NAMEABLE_TAKES - 1 taken before it, no older."""
    batch = [_message(1, "m-1", key="k1")]
    shipper = RecordBuffer()
    handle = shipper.emit_messages("published", "t", batch, ts_us=1)
    chunks = [shipper.take()]
    for i in range(NAMEABLE_TAKES - 2):
        shipper.emit("nacked", message_id=f"m-0{i}", topic="t", message_type="normal", ts_us=2)
        chunks.append(shipper.take())
    shipper.emit_messages("stored", "t", batch, ts_us=3, same_as=handle)
    chunks.append(shipper.take())
    assert _column(chunks[-1], "refs") == [_runs((0, 0, 1))]  # the 15th batch after it still names it
    shipper.emit("nacked", message_id="m-0", topic="t", message_type="normal", ts_us=4)
    chunks.append(shipper.take())  # the writer keeps 15 batches back: record 0 is gone by now
    shipper.emit_messages("stored", "t", batch, ts_us=5, same_as=handle)
    chunks.append(shipper.take())
    assert _column(chunks[-1], "refs") == [None] and _column(chunks[-1], "message_id") == [["m-1"]]
    _written(tmp_path, *chunks)
    assert [(e["event"], e["message_id"], e.get("key")) for e in _rows(tmp_path) if e["event"] != "nacked"] == [
        ("published", "m-1", "k1"), ("stored", "m-1", "k1"), ("stored", "m-1", "k1")]


def test_delivery_and_ack_frames_of_published_seq_runs_name_those_records(tmp_path):
    """A frame whose seqs lie within published records (across batches, and across shipments) ships its
    seqs and attempts only; the decoder names those records run by run, also for seqs out of order."""
    batches = [[_message(1, "m-1", key="k1"), _message(2, "m-2", message_type="order.paid")],
               [_message(3, "m-3", business_id="b3"), _message(4, "m-4")]]
    shipper = RecordBuffer()
    for i, batch in enumerate(batches):
        shipper.emit_messages("published", "t", batch, app_id="shop", client_host="h:1", ts_us=10 + i)
    shipper.emit_messages("published", "other", [_message(3, "x-3")], app_id="shop", client_host="h:1", ts_us=12)
    published = shipper.take()
    everything = batches[0] + batches[1]
    shipper.emit_group("delivered", "t", "g", [(m.seq, 1, m.fields) for m in everything[1:]], consumer="c-1",
                       client_host="h:2", ts_us=20)
    shipper.emit_attempts("acked", "t", "g", [(m, 1, 0.0) for m in everything[1:3]], consumer="c-1",
                          client_host="h:2", ts_us=30)
    shipper.emit_group("delivered", "t", "g", [(4, 2, everything[3].fields), (3, 2, everything[2].fields)],
                       consumer="c-2", client_host="h:2", ts_us=40)  # not in seq order: a run per message
    frames = shipper.take()
    # record 0 from 1 on, then record 1
    assert _column(frames, "refs") == [_runs((0, 1, 1), (1, 0, 2)), _runs((0, 1, 1), (1, 0, 1)),
                                       _runs((1, 1, 1), (1, 0, 1))]
    assert _column(frames, "message_id") == [None, None, None]
    assert _column(frames, "attempt") == [[1, 1, 1], [1, 1], [2, 2]]
    _written(tmp_path, published, frames)
    got = [(e["event"], e["message_id"], e["message_type"], e.get("key"), e.get("business_id"), e.get("attempt"),
            e.get("consumer")) for e in _rows(tmp_path) if e["event"] != "published"]
    assert got == [("delivered", "m-2", "order.paid", None, None, 1, "c-1"),
                   ("delivered", "m-3", "normal", None, "b3", 1, "c-1"),
                   ("delivered", "m-4", "normal", None, None, 1, "c-1"),
                   ("acked", "m-2", "order.paid", None, None, 1, "c-1"),
                   ("acked", "m-3", "normal", None, "b3", 1, "c-1"),
                   ("delivered", "m-4", "normal", None, None, 2, "c-2"),
                   ("delivered", "m-3", "normal", None, "b3", 2, "c-2")]


def test_a_frame_out_of_seq_order_names_its_messages_in_its_order(tmp_path):
    """Seqs 1, 3, 2, 4 span exactly four published seqs, yet are not one run: the frame names them one run
    each, in the frame's order."""
    batch = [_message(i, f"m-{i}", key=f"k{i}") for i in range(1, 5)]
    shipper = RecordBuffer()
    shipper.emit_messages("published", "t", batch, ts_us=1)
    order = [batch[0], batch[2], batch[1], batch[3]]
    shipper.emit_group("delivered", "t", "g", [(m.seq, 1, m.fields) for m in order], consumer="c-1", ts_us=2)
    chunk = shipper.take()
    assert _column(chunk, "refs") == [None, _runs((0, 0, 1), (0, 2, 1), (0, 1, 1), (0, 3, 1))]
    assert _column(chunk, "message_id") == [["m-1", "m-2", "m-3", "m-4"], None]
    _written(tmp_path, chunk)
    assert [(e["event"], e["message_id"], e["key"]) for e in _rows(tmp_path) if e["event"] == "delivered"] == [
        ("delivered", "m-1", "k1"), ("delivered", "m-3", "k3"), ("delivered", "m-2", "k2"), ("delivered", "m-4", "k4")]


def test_the_buffer_takes_sizes_and_attempts_from_the_messages_and_rows_it_is_handed(tmp_path):
    """Nothing is handed over for the trace: body sizes come from the messages (one value for a batch of
    equal bodies), attempts from the rows and entries (one value when all are first attempts)."""
    batch = [_message(1, "m-1", body=b"123"), _message(2, "m-2", body=b"1234567")]
    equal = [_message(3, "m-3", body=b"1234"), _message(4, "m-4", body=b"abcd")]
    shipper = RecordBuffer()
    shipper.emit_messages("published", "t", batch, ts_us=1)
    shipper.emit_messages("published", "t", equal, ts_us=1)
    shipper.emit_group("delivered", "t", "g", [(m.seq, 1, m.fields) for m in batch], consumer="c-1", ts_us=2)
    shipper.emit_group("delivered", "t", "g", [(m.seq, 2, m.fields) for m in batch], consumer="c-2", ts_us=3)
    shipper.emit_group("delivered", "t", "g", [(3, 1, equal[0].fields), (4, 2, equal[1].fields)], consumer="c-3",
                       ts_us=4)
    shipper.emit_attempts("acked", "t", "g", [(equal[0], 1, 0.0), (equal[1], 2, 0.0)], consumer="c-3", ts_us=5)
    records = shipper.take_records()
    read = read_parts(records)
    assert [type(p).__name__ for p in read.parts[-1][:2]] == ["list", "Run"]  # sizes
    assert [type(p).__name__ for p in read.parts[-2][2:]] == ["Run", "list", "list", "list"]  # attempts
    _written(tmp_path, to_batch(records))
    assert [(e["event"], e["message_id"], e.get("size"), e.get("attempt"), e.get("consumer"))
            for e in _rows(tmp_path)] == [
        ("published", "m-1", 3, None, None), ("published", "m-2", 7, None, None),
        ("published", "m-3", 4, None, None), ("published", "m-4", 4, None, None),
        ("delivered", "m-1", None, 1, "c-1"), ("delivered", "m-2", None, 1, "c-1"),
        ("delivered", "m-1", None, 2, "c-2"), ("delivered", "m-2", None, 2, "c-2"),
        ("delivered", "m-3", None, 1, "c-3"), ("delivered", "m-4", None, 2, "c-3"),
        ("acked", "m-3", None, 1, "c-3"), ("acked", "m-4", None, 2, "c-3")]


def test_ids_joined_and_a_shared_type_found_by_the_buffer(tmp_path):
    """A batch of one type without keys or business ids: the type repeated, null key and business id lists,
    the ids joined by NUL; an id holding a NUL ships the ids as a list; a mixed batch, column by column."""
    plain = [_message(i, f"p-{i}", message_type="order.paid") for i in (1, 2, 3)]
    odd = [_message(4, "o\0-4", message_type="order.paid"), _message(5, "o-5", message_type="order.paid")]
    mixed = [_message(6, "x-6", key="k"), _message(7, "x-7", message_type="order.paid")]
    shipper = RecordBuffer()
    for batch in (plain, odd, mixed):
        shipper.emit_messages("published", "t", batch, ts_us=1)
        records = shipper.take_records()
        chunk = to_batch(records)
        if batch is plain:
            assert records.parts[0] == [joined("p-1\0p-2\0p-3", 3)]
            assert [_column(chunk, c) for c in ("message_id", "message_type", "key", "business_id")] == [
                [["p-1", "p-2", "p-3"]], [["order.paid"] * 3], [None], [None]]
        if batch is odd:
            assert records.parts[0] == [["o\0-4", "o-5"]]
            assert _column(chunk, "message_id") == [["o\0-4", "o-5"]]
        _written(tmp_path / str(batch[0].seq), chunk)
    rows = [(e["message_id"], e["message_type"], e.get("key"), e.get("business_id"))
            for seq in (1, 4, 6) for e in _rows(tmp_path / str(seq))]
    assert rows == [("p-1", "order.paid", None, None), ("p-2", "order.paid", None, None),
                    ("p-3", "order.paid", None, None), ("o\0-4", "order.paid", None, None),
                    ("o-5", "order.paid", None, None), ("x-6", "normal", "k", None), ("x-7", "order.paid", None, None)]


def test_a_batch_sharing_type_key_and_business_id_ships_them_once_each_and_comes_back_whole(tmp_path):
    """One pass finds that all messages share type, key and business id; each column then ships the one
    value repeated (or a null list for no key); a batch where only the last differs takes the
    column-by-column way."""
    shared = [_message(i, f"s-{i}", message_type="order.paid", business_id="b-7") for i in (1, 2, 3)]
    last_differs = [_message(4, "d-4", key="k"), _message(5, "d-5", key="k"), _message(6, "d-6", key="other")]
    shipper = RecordBuffer()
    shipper.emit_messages("published", "t", shared, ts_us=1)
    one = shipper.take()
    assert [_column(one, c) for c in ("message_id", "message_type", "key", "business_id")] == [
        [["s-1", "s-2", "s-3"]], [["order.paid"] * 3], [None], [["b-7"] * 3]]
    shipper.emit_messages("published", "t", last_differs, ts_us=2)
    two = shipper.take()
    assert _column(two, "key") == [["k", "k", "other"]]
    _written(tmp_path, one, two)
    assert [(e["message_id"], e["message_type"], e.get("key"), e.get("business_id")) for e in _rows(tmp_path)] == [
        ("s-1", "order.paid", None, "b-7"), ("s-2", "order.paid", None, "b-7"), ("s-3", "order.paid", None, "b-7"),
        ("d-4", "normal", "k", None), ("d-5", "normal", "k", None), ("d-6", "normal", "other", None)]


def test_records_naming_a_batch_the_writer_never_got_are_dropped_and_counted(tmp_path):
    batch = [_message(1, "m-1"), _message(2, "m-2")]
    shipper = RecordBuffer()
    handle = shipper.emit_messages("published", "t", batch, ts_us=100)
    shipper.take()  # batch 0 is lost on its way; the next one names it, then goes on
    shipper.emit_messages("stored", "t", batch, ts_us=150, same_as=handle)
    shipper.emit_attempts("acked", "t", "g", [(batch[0], 3, 0.0)], consumer="c-1", client_host="h:2", ts_us=155)
    shipper.emit_group("delivered", "t", "g", [(9, 2, _message(9, "m-9").fields)], consumer="c-1",
                       client_host="h:2", ts_us=160)
    writer = _written(tmp_path, shipper.take())
    assert writer.dropped == 3
    assert [(e["event"], e["message_id"], e["attempt"]) for e in _rows(tmp_path)] == [("delivered", "m-9", 2)]


def test_a_dropped_batch_is_never_named(tmp_path):
    first, second = [_message(1, "m-1")], [_message(2, "m-2")]
    shipper = RecordBuffer()
    handle = shipper.emit_messages("published", "t", first, ts_us=1)
    assert shipper.drop() == 1  # the trace process fell behind: never sent
    shipper.emit_messages("stored", "t", first, ts_us=2, same_as=handle)
    shipper.emit_group("delivered", "t", "g", [(1, 1, first[0].fields)], ts_us=3)
    shipper.emit_messages("published", "t", second, ts_us=4)
    shipper.emit_group("delivered", "t", "g", [(2, 1, second[0].fields)], ts_us=5)
    chunk = shipper.take()
    # only the delivery of a published record the writer gets names it
    assert _column(chunk, "refs") == [None, None, None, _runs((3, 0, 1))]
    _written(tmp_path, chunk)
    assert [(e["event"], e["message_id"]) for e in _rows(tmp_path)] == [
        ("stored", "m-1"), ("delivered", "m-1"), ("published", "m-2"), ("delivered", "m-2")]


def test_an_ack_frames_in_flight_entries_become_rows_with_their_attempts(tmp_path):
    """`emit_attempts` takes a subscription's in-flight entries (message, attempt, deadline) as they are,
    in a shipped batch and in a writer's own records."""
    m1, m2 = _message(1, "m-1", key="k1"), _message(2, "m-2", business_id="b2")
    entries = [(m1, 1, 1000.5), (m2, 3, 1000.7)]
    shipper = RecordBuffer()
    shipper.emit_attempts("acked", "t", "g", entries, consumer="c-1", client_host="h:2", ts_us=5)
    _written(tmp_path / "shipped", shipper.take())
    writer = TraceFileWriter(tmp_path / "own", node_id="n1", cluster="c")
    writer.emit_attempts("acked", "t", "g", entries, consumer="c-2", client_host="h:3", ts_us=6)
    writer.close()
    common = {"v": 1, "event": "acked", "topic": "t", "message_type": "normal", "group": "g", "cluster": "c",
              "broker": "n1"}
    one = {"message_id": "m-1", "key": "k1", "attempt": 1}
    two = {"message_id": "m-2", "business_id": "b2", "attempt": 3}
    assert _rows(tmp_path / "shipped") == [
        {**common, **one, "ts_us": 5, "consumer": "c-1", "client_host": "h:2"},
        {**common, **two, "ts_us": 5, "consumer": "c-1", "client_host": "h:2"},
    ]
    assert _rows(tmp_path / "own") == [
        {**common, **one, "ts_us": 6, "consumer": "c-2", "client_host": "h:3"},
        {**common, **two, "ts_us": 6, "consumer": "c-2", "client_host": "h:3"},
    ]


def test_string_columns_come_back_as_they_were_empty_null_non_ascii_or_holding_a_nul(tmp_path):
    shipper = RecordBuffer()
    shipper.emit_messages("published", "t", [
        _message(1, "id-1", message_type="ab", key="", business_id="z1"),
        _message(2, "id-2", message_type="c", key="", business_id="z2"),
    ], ts_us=1)
    shipper.emit_messages("published", "t", [
        _message(3, "id-3", message_type="def", key=None), _message(4, "id-4", message_type="gh", key="k4"),
    ], ts_us=2)
    chunk = shipper.take()
    assert _column(chunk, "message_id") == [["id-1", "id-2"], ["id-3", "id-4"]]
    assert _column(chunk, "key") == [["", ""], [None, "k4"]]
    assert _column(chunk, "business_id") == [["z1", "z2"], None]  # all null: a null list
    shipper.emit_messages("published", "t", [_message(5, "id-5", message_type="zahlung.eingegangen-ü")], ts_us=3)
    shipper.emit_messages("published", "t", [_message(6, "id-6", business_id="x\0y")], ts_us=4)
    odd = shipper.take()
    assert _column(odd, "message_type") == [["zahlung.eingegangen-ü"], ["normal"]]
    assert _column(odd, "key") == [None, None] and _column(odd, "business_id") == [None, ["x\0y"]]
    _written(tmp_path, chunk, odd)
    got = [(e["message_id"], e["message_type"], e.get("key"), e.get("business_id")) for e in _rows(tmp_path)]
    assert got == [("id-1", "ab", "", "z1"), ("id-2", "c", "", "z2"), ("id-3", "def", None, None),
                   ("id-4", "gh", "k4", None), ("id-5", "zahlung.eingegangen-ü", None, None),
                   ("id-6", "normal", None, "x\0y")]


def test_a_key_column_of_empty_strings_only(tmp_path):
    shipper = RecordBuffer()
    shipper.emit_messages("stored", "t", [_message(1, "m-1", key=""), _message(2, "m-2", key=""),
                                          _message(3, "m-3", key="")], ts_us=1)
    chunk = shipper.take()
    assert _column(chunk, "key") == [["", "", ""]]
    _written(tmp_path, chunk)
    assert [(e["message_id"], e["key"]) for e in _rows(tmp_path)] == [("m-1", ""), ("m-2", ""), ("m-3", "")]


def test_the_sink_names_published_records_across_intervals_and_not_after_a_dropped_batch(tmp_path):
    """The real sink and trace process: a `stored` batch and a delivery frame shipped an interval after
    their `published` batch name it; once the child fell behind and a batch was dropped, nothing names
    that batch's records."""
    first = [_message(1, "m-1", key="k1", business_id="b1"), _message(2, "m-2")]
    second = [_message(3, "m-3", business_id="b3"), _message(4, "m-4", key="k4")]

    async def main():
        sink = await ProcessTraceSink(tmp_path, node_id="n1", cluster="c", nice=0, ship_interval_s=3600).start()
        handle = sink.emit_messages("published", "t", first, app_id="shop", client_host="h", ts_us=10)
        sink.ship()
        sink.emit_messages("stored", "t", first, app_id="shop", client_host="h", ts_us=11, same_as=handle)
        sink.emit_group("delivered", "t", "g", [(m.seq, 1, m.fields) for m in first], consumer="c-1",
                        client_host="h2", ts_us=11)
        sink.ship()
        limit, sink.max_buffer_bytes = sink.max_buffer_bytes, -1  # as if the child were far behind
        handle = sink.emit_messages("published", "t", second, app_id="shop", client_host="h", ts_us=12)
        sink.ship()
        sink.max_buffer_bytes = limit
        sink.emit_messages("stored", "t", second, app_id="shop", client_host="h", ts_us=13, same_as=handle)
        sink.emit_attempts("acked", "t", "g", [(m, 1, 0.0) for m in second], consumer="c-1", client_host="h2",
                           ts_us=14)
        sink.close()
        await sink.wait_closed()
        return sink.dropped

    assert asyncio.run(main()) == 2
    common = {"v": 1, "topic": "t", "message_type": "normal", "cluster": "c", "broker": "n1", "app_id": "shop",
              "client_host": "h"}
    group = {"v": 1, "topic": "t", "message_type": "normal", "cluster": "c", "broker": "n1", "client_host": "h2",
             "group": "g", "consumer": "c-1", "attempt": 1}
    assert _rows(tmp_path) == [
        {**common, "event": "published", "ts_us": 10, "message_id": "m-1", "key": "k1", "business_id": "b1",
         "size": 5},
        {**common, "event": "published", "ts_us": 10, "message_id": "m-2", "size": 5},
        {**common, "event": "stored", "ts_us": 11, "message_id": "m-1", "key": "k1", "business_id": "b1"},
        {**common, "event": "stored", "ts_us": 11, "message_id": "m-2"},
        {**group, "event": "delivered", "ts_us": 11, "message_id": "m-1", "key": "k1", "business_id": "b1"},
        {**group, "event": "delivered", "ts_us": 11, "message_id": "m-2"},
        {**common, "event": "stored", "ts_us": 13, "message_id": "m-3", "business_id": "b3"},
        {**common, "event": "stored", "ts_us": 13, "message_id": "m-4", "key": "k4"},
        {**group, "event": "acked", "ts_us": 14, "message_id": "m-3", "business_id": "b3"},
        {**group, "event": "acked", "ts_us": 14, "message_id": "m-4", "key": "k4"},
    ]


def test_an_open_file_left_by_a_killed_writer_keeps_its_ids_cluster_and_broker(tmp_path):
    writer = TraceFileWriter(tmp_path / "a", node_id="n1", cluster="prod-a")
    writer.emit("stored", message_id="m-1", topic="t", message_type="normal", key="k1", ts_us=1)
    writer.flush()
    writer.emit("stored", message_id="m-2", topic="t", message_type="normal", ts_us=2)
    writer.flush()
    (left,) = (tmp_path / "a").glob("*.arrows.open")
    assert pa.ipc.open_stream(left.read_bytes()).schema.metadata[b"switchyard.trace"] == FILE_FORMAT
    torn = left.read_bytes()[:-40]  # the second batch torn, as a kill leaves it
    writer.close()
    (written,) = (tmp_path / "a").glob("*.arrows")
    first_id = read_events(str(written)).column("event_id")[0].as_py()
    assert first_id.endswith("0000000000000001")

    (tmp_path / "b").mkdir()
    (tmp_path / "b" / left.name).write_bytes(torn)
    TraceFileWriter(tmp_path / "b", node_id="n1", cluster="other").close()
    (recovered,) = (tmp_path / "b").glob("*.arrows")
    assert read_events(str(recovered)).to_pylist() == [
        {"v": 1, "event_id": first_id, "ts_us": 1, "event": "stored", "message_id": "m-1", "topic": "t",
         "message_type": "normal", "key": "k1", "business_id": None, "cluster": "prod-a", "broker": "n1",
         "app_id": None, "client_host": None, "group": None, "consumer": None, "attempt": None, "detail": None,
         "size": None}]


def test_a_broker_records_a_batch_stored_delivered_and_acked_with_the_published_fields(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    sent = {}
    with Producer(**cluster.client_kwargs()) as producer:
        batch = [Message(b"x" * i, message_type="order.paid" if i % 2 else "order.created",
                         key=f"k-{i}" if i % 3 else None, business_id=f"b-{i}") for i in range(1, 41)]
        for i, message_id in enumerate(producer.send_many("orders", batch), start=1):
            sent[message_id] = i
        # a batch of one type without keys or business ids: the server's shortcut for the trace
        plain = producer.send_many("orders", [Message(b"y" * 9, message_type="order.paid") for _ in range(20)])
    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: got.count("c") >= 60, 10, "the deliveries")
    broker.stop()  # a graceful stop closes the open trace file
    steps: dict[str, dict[str, dict]] = {}
    for e in read_trace_events(broker.data_dir / "trace"):
        steps.setdefault(e["message_id"], {})[e["event"]] = e
    assert sorted(steps) == sorted([*sent, *plain])
    for message_id in plain:
        events = steps[message_id]
        assert sorted(events) == ["acked", "delivered", "published", "stored"]
        for row in events.values():
            assert (row["message_type"], row.get("key"), row.get("business_id")) == ("order.paid", None, None)
        assert events["published"]["size"] == 9
    for message_id, i in sent.items():
        same = {"message_id": message_id, "topic": "orders", "message_type": "order.paid" if i % 2 else "order.created",
                "key": f"k-{i}" if i % 3 else None, "business_id": f"b-{i}", "cluster": cluster.name,
                "broker": broker.node_id}
        events = steps[message_id]
        assert sorted(events) == ["acked", "delivered", "published", "stored"]
        for event, extra in (("published", {"app_id": APP, "size": i}), ("stored", {"app_id": APP}),
                             ("delivered", {"group": "billing", "attempt": 1}),
                             ("acked", {"group": "billing", "attempt": 1})):
            row = events[event]
            assert {k: row.get(k) for k in [*same, *extra]} == {**same, **extra}, (event, row)
            assert [row.get(k) for k in ("size", "group", "app_id")] == [extra.get(k) for k in ("size", "group", "app_id")]
        assert events["stored"]["client_host"] == events["published"]["client_host"]


def test_a_broker_rolls_its_trace_file_at_the_age_it_is_given(cluster):
    """`--trace-roll-s 1`: the events of a running broker reach a Parquet file within seconds, not at stop."""
    cluster.standard("orders")
    broker = cluster.broker("--trace-roll-s", "1")
    with Producer(**cluster.client_kwargs()) as producer:
        ids = producer.send_many("orders", [Message(b"z") for _ in range(5)])
    folder = broker.data_dir / "trace"
    wait_for(lambda: len({e["message_id"] for e in read_trace_events(folder) if e["event"] == "stored"}) == 5, 15,
             "the stored events in a rolled Parquet file")
    assert list(folder.glob("*.arrows"))
    assert {e["message_id"] for e in read_trace_events(folder)} == set(ids)
    broker.stop()



def test_the_trace_process_cuts_a_string_column_of_joined_runs_and_lists_whole(tmp_path):
    """A column of Joined ids, runs, single values and lists (non-ASCII, empty) comes out value for value; a
    part holding a NUL or a null makes the column take its values one by one, with the same result."""
    messages = [_message(1, "m-1"), _message(2, "m-ü"), _message(3, "")]
    shipper = RecordBuffer()
    shipper.emit_messages("published", "t", messages, ts_us=1)  # ids Joined, the type a Run
    shipper.emit("nacked", message_id="m-1", topic="t", message_type="tÿpe", ts_us=2)
    shipper.emit_messages("published", "t", [_message(4, "x\0y", message_type="a"), _message(5, "z")], ts_us=3)
    plain = shipper.take_records()
    assert [type(p).__name__ for p in read_parts(plain).parts[0]] == ["Joined", "list", "list"]
    batch = to_batch(plain)
    assert _column(batch, "message_id") == [["m-1", "m-ü", ""], ["m-1"], ["x\0y", "z"]]
    assert _column(batch, "message_type") == [["normal"] * 3, ["tÿpe"], ["a", "normal"]]
    assert _column(batch, "key") == [None, None, None]


def test_records_are_made_as_shipped_and_read_back_as_runs_and_joined():
    """The broker makes a Run and a Joined as the maps it ships (no pass over the parts at each shipment); the
    trace process reads them back as Run and Joined, and the rest of a record as it was."""
    shipper = RecordBuffer()
    shipper.emit_messages("published", "t", [_message(1, "m-1"), _message(2, "m-2")], ts_us=1)
    shipper.emit_attempts("acked", "t", "g", [(_message(9, "x-9"), 1, 0.0)], consumer="c-1", ts_us=2)
    records = shipper.take_records()
    assert records.parts[0][0] == joined("m-1\0m-2", 2) == {"j": "m-1\0m-2", "n": 2}
    assert records.parts[1][0] == run("normal", 2) == {"v": "normal", "n": 2}
    assert records.parts[4][1] == run(1, 1)  # the ack's attempts
    back = unpack(pack(records))
    assert back.parts[0][0] == Joined("m-1\0m-2", 2) and type(back.parts[0][0]) is Joined
    assert back.parts[1][0] == Run("normal", 2) and type(back.parts[1][0]) is Run
    assert back.parts[4][1] == Run(1, 1) and type(back.parts[4][1]) is Run
    assert (back.first, back.counts, back.seqs) == (records.first, records.counts, records.seqs)
