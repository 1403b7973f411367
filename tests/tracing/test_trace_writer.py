"""The broker's trace writer and its trace process: batches of records built column-wise, an Arrow stream
while open, Parquet once closed (fsync + rename), torn batches cut on recovery, drops counted."""

import asyncio
import subprocess
import sys
import threading
import time
import uuid

import pyarrow as pa
import pytest

from broker_core.storage.store import StoredMessage
from broker_core.tracing.process import ProcessTraceSink, frame
from broker_core.tracing.records import RecordBuffer
from broker_core.tracing.schema import (
    event_count,
    event_schema,
    read_events,
    read_records,
    read_trace_events,
    records_schema,
    records_to_events,
)
from broker_core.tracing.writer import TraceFileWriter


def _rows(paths):
    rows = []
    for p in sorted(paths):
        rows += [{k: v for k, v in r.items() if v is not None} for r in read_events(str(p)).to_pylist()]
    for r in rows:
        assert len(r.pop("event_id")) == 32
    return rows


def _files(folder):
    """The trace files (the writer's lock file, a dot file, left out)."""
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def test_a_second_writer_of_the_node_waits_for_the_first_to_finish(tmp_path):
    first = TraceFileWriter(tmp_path, node_id="n1", cluster="c")
    first.emit("stored", message_id="m-1", topic="t", message_type="normal", ts_us=1)
    first.flush()  # its open file must not be taken over by the second writer's recovery

    def later():
        time.sleep(0.5)
        first.close()

    closer = threading.Thread(target=later)
    closer.start()
    started = time.monotonic()
    second = TraceFileWriter(tmp_path, node_id="n1", cluster="c")
    assert time.monotonic() - started >= 0.4
    closer.join()
    second.emit("stored", message_id="m-2", topic="t", message_type="normal", ts_us=2)
    second.close()
    assert [e["message_id"] for e in read_trace_events(tmp_path)] == ["m-1", "m-2"]
    assert [p.name[-13:] for p in _files(tmp_path)] == ["000001.arrows", "000002.arrows"]


def _message(seq, message_id, body=b"12345", message_type="normal", key=None, business_id=None):
    return StoredMessage(seq, [message_id, message_type, key, business_id, {}, body, 0, 0, 0, 0], "shop", 0, ("g",))


def test_emitted_events_are_written_in_closed_files(tmp_path):
    writer = TraceFileWriter.for_data_dir(tmp_path, node_id="node-1", cluster="prod-a")
    writer.emit("published", message_id="m-1", topic="orders", message_type="normal", key='k"1',
                business_id="order-7", app_id="shop", client_host="127.0.0.1:5000", size=12, ts_us=1000)
    writer.emit("delivered", message_id="m-1", topic="orders", message_type="normal", group="billing",
                consumer="c-9", attempt=1, ts_us=2000)
    assert _files(tmp_path / "trace") == []  # nothing written on the caller's thread
    writer.close()

    files = _files(tmp_path / "trace")
    assert len(files) == 1
    assert files[0].name.startswith("trace-node-1-") and files[0].name.endswith("-000001.arrows")
    assert pa.ipc.open_stream(files[0].read_bytes()).schema.remove_metadata() == records_schema()  # format 2: a row per record
    assert read_records(str(files[0])).num_rows == 2
    assert _rows(files) == [
        {"v": 1, "ts_us": 1000, "event": "published", "message_id": "m-1", "topic": "orders",
         "message_type": "normal", "key": 'k"1', "business_id": "order-7", "app_id": "shop",
         "client_host": "127.0.0.1:5000", "size": 12, "cluster": "prod-a", "broker": "node-1"},
        {"v": 1, "ts_us": 2000, "event": "delivered", "message_id": "m-1", "topic": "orders",
         "message_type": "normal", "group": "billing", "consumer": "c-9", "attempt": 1,
         "cluster": "prod-a", "broker": "node-1"},
    ]


def test_files_compress_smaller_than_lz4_and_an_lz4_file_of_an_earlier_version_reads_the_same(tmp_path):
    """Trace files compress their buffers with zstd: smaller than the same records as LZ4 (what earlier
    versions wrote). Such an LZ4 file is read as it is, event for event what the zstd file gives."""
    writer = TraceFileWriter.for_data_dir(tmp_path / "new", node_id="node-1", cluster="prod-a")
    for b in range(20):
        messages = [StoredMessage(b * 100 + i, [str(uuid.uuid4()), "order.created", None, None, {}, b"x" * 1000, 0,
                                                0, 0, 0], "shop", 0, ("g",)) for i in range(100)]
        writer.emit_messages("published", "orders", messages, app_id="shop", ts_us=1000 + b)
    writer.close()
    [path] = _files(tmp_path / "new" / "trace")
    table = read_records(str(path))
    old = tmp_path / path.name
    with pa.OSFile(str(old), "wb") as sink, pa.ipc.new_stream(
            sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as stream:
        stream.write_table(table)
    assert path.stat().st_size < 0.8 * old.stat().st_size
    events = read_events(str(old)).to_pylist()
    assert len(events) == 2000 and events == read_events(str(path)).to_pylist()


def test_shipped_records_expand_to_one_row_per_message_in_their_order(tmp_path):
    m1, m2 = _message(1, "m-1", key="k1", business_id="b1"), _message(2, "m-2", body=b"1234567")
    messages = [m1, m2]
    shipper = RecordBuffer()
    published = shipper.emit_messages("published", "orders", messages, app_id="shop", client_host="10.0.0.1:1",
                                      ts_us=100)
    shipper.emit_messages("stored", "orders", messages, app_id="shop", client_host="10.0.0.1:1", ts_us=150,
                          same_as=published)  # the same list
    shipper.emit("nacked", message_id="m-1", topic="orders", message_type="normal", key="k1", business_id="b1",
                 client_host="10.0.0.2:2", group="billing", consumer="c-1", attempt=1, detail="busy", ts_us=300)
    shipper.emit_group("delivered", "orders", "billing", [(1, 1, m1.fields), (2, 3, m2.fields)], consumer="c-1",
                       client_host="10.0.0.2:2", ts_us=200)
    shipped = shipper.take()
    assert shipped.column("count").to_pylist() == [2, 2, 1, 2]  # one count per record
    named = [{"record": 0, "offset": 0, "count": 2}]  # `stored` and `delivered` name record 0's messages
    assert shipped.column("refs").to_pylist() == [None, named, None, named]
    assert shipped.column("message_id").to_pylist() == [["m-1", "m-2"], None, ["m-1"], None]
    writer = TraceFileWriter(tmp_path, node_id="n1", cluster="c")
    writer.write(shipped)
    writer.close()
    common = {"v": 1, "topic": "orders", "message_type": "normal", "cluster": "c", "broker": "n1"}
    assert _rows(tmp_path.glob("*.arrows")) == [
        {**common, "event": "published", "ts_us": 100, "message_id": "m-1", "key": "k1", "business_id": "b1",
         "app_id": "shop", "client_host": "10.0.0.1:1", "size": 5},
        {**common, "event": "published", "ts_us": 100, "message_id": "m-2", "app_id": "shop",
         "client_host": "10.0.0.1:1", "size": 7},
        {**common, "event": "stored", "ts_us": 150, "message_id": "m-1", "key": "k1", "business_id": "b1",
         "app_id": "shop", "client_host": "10.0.0.1:1"},
        {**common, "event": "stored", "ts_us": 150, "message_id": "m-2", "app_id": "shop", "client_host": "10.0.0.1:1"},
        {**common, "event": "nacked", "ts_us": 300, "message_id": "m-1", "key": "k1", "business_id": "b1",
         "client_host": "10.0.0.2:2", "group": "billing", "consumer": "c-1", "attempt": 1, "detail": "busy"},
        {**common, "event": "delivered", "ts_us": 200, "message_id": "m-1", "key": "k1", "business_id": "b1",
         "client_host": "10.0.0.2:2", "group": "billing", "consumer": "c-1", "attempt": 1},
        {**common, "event": "delivered", "ts_us": 200, "message_id": "m-2", "client_host": "10.0.0.2:2",
         "group": "billing", "consumer": "c-1", "attempt": 3},
    ]


def test_event_ids_are_unique_across_writers_and_batches(tmp_path):
    for _ in range(2):
        writer = TraceFileWriter(tmp_path, node_id="n1", cluster="c")
        for i in range(70_000):
            writer.emit("stored", message_id=f"m-{i}", topic="t", message_type="normal")
            if i == 65_000:
                writer.flush()
        writer.close()
    ids = pa.concat_arrays([read_events(str(p)).column("event_id").combine_chunks()
                            for p in sorted(tmp_path.glob("*.arrows"))])
    assert len(ids) == 140_000 and len(set(ids.to_pylist())) == 140_000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids.to_pylist()[:10])


def test_files_roll_by_size_and_only_closed_files_are_read(tmp_path):
    writer = TraceFileWriter(tmp_path, node_id="n1", cluster="c", max_bytes=2000)
    for i in range(12):
        writer.emit("stored", message_id=f"m-{i}", topic="t", message_type="normal", ts_us=i + 1)
        writer.flush()
    assert len(list(tmp_path.glob("*.arrows.open"))) <= 1 and len(list(tmp_path.glob("*.arrows"))) >= 2
    writer.close()
    files = _files(tmp_path)
    assert [p.suffix for p in files] == [".arrows"] * len(files)
    assert [e["ts_us"] for e in read_trace_events(tmp_path)] == list(range(1, 13))


def _left_open(folder) -> tuple[str, bytes]:
    """The name and bytes of a writer's open file after two batches (m-1, m-2), as a kill would leave it."""
    writer = TraceFileWriter(folder, node_id="n1", cluster="c")
    for i in (1, 2):
        writer.emit("stored", message_id=f"m-{i}", topic="t", message_type="normal", ts_us=i)
        writer.flush()
    (left,) = folder.glob("*.arrows.open")
    name, data = left.name, left.read_bytes()
    writer.close()
    return name, data


def test_a_file_left_open_whole_by_a_killed_writer_is_closed_as_it_is(tmp_path):
    """Killed between two batches (no end-of-stream marker): the file is renamed, byte for byte, not copied."""
    name, whole = _left_open(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / name).write_bytes(whole)
    TraceFileWriter(tmp_path / "b", node_id="n1", cluster="c").close()
    (closed,) = _files(tmp_path / "b")
    assert closed.name == name[: -len(".open")] and closed.read_bytes() == whole
    assert [e["message_id"] for e in read_trace_events(tmp_path / "b")] == ["m-1", "m-2"]


def test_a_file_left_open_by_a_killed_writer_is_closed_without_its_torn_batch(tmp_path):
    torn = _left_open(tmp_path / "a")[1][:-40]  # the second batch torn (and no end-of-stream marker)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "trace-n1-20250101T000000-000001.arrows.open").write_bytes(torn)
    (tmp_path / "b" / "trace-n1-20250101T000000-000000.arrows.tmp").write_bytes(b"half")  # a copy cut short
    TraceFileWriter(tmp_path / "b", node_id="n1", cluster="c").close()
    assert [p.name for p in _files(tmp_path / "b")] == ["trace-n1-20250101T000000-000001.arrows"]
    assert [e["message_id"] for e in read_trace_events(tmp_path / "b")] == ["m-1"]
    # the next file continues the sequence
    writer = TraceFileWriter(tmp_path / "b", node_id="n1", cluster="c")
    writer.emit("stored", message_id="m-3", topic="t", message_type="normal")
    writer.close()
    assert any(p.name.endswith("-000002.arrows") for p in (tmp_path / "b").iterdir())


def test_an_open_file_of_an_unknown_layout_is_kept_aside_not_converted(tmp_path):
    """An open file whose columns are not those of a trace file (a layout of brokers before format 2) is
    renamed `.unknown`: no Parquet file the index could not read."""
    schema = event_schema()
    left = tmp_path / "trace-n1-20250101T000000-000001.arrows.open"
    row = {f.name: [None] for f in schema} | {"v": [1], "event_id": ["0" * 32], "ts_us": [1], "event": ["stored"]}
    with pa.OSFile(str(left), "wb") as sink, pa.ipc.new_stream(sink, schema) as stream:
        stream.write_batch(pa.RecordBatch.from_pydict(row, schema=schema))
    TraceFileWriter(tmp_path, node_id="n1", cluster="c").close()
    assert [p.name for p in _files(tmp_path)] == ["trace-n1-20250101T000000-000001.unknown"]


def test_when_the_trace_process_is_too_far_behind_batches_are_dropped_and_counted(tmp_path):
    # (nice=0 in these tests: a child at idle priority can wait longer than wait_closed's 10 s for a core on a
    # host the suite keeps busy; what is tested here is not its priority)
    async def main():
        sink = await ProcessTraceSink(tmp_path, node_id="n1", cluster="c", nice=0, ship_interval_s=3600,
                                      max_buffer_bytes=-1).start()  # as if the child were far behind
        sink.emit_messages("stored", "t", [_message(1, "m-1"), _message(2, "m-2")], ts_us=1)
        sink.ship()
        sink.emit("stored", message_id="m-3", topic="t", message_type="normal", ts_us=2)
        sink.max_buffer_bytes = 64 * 1024 * 1024
        sink.ship()
        sink.close()
        await sink.wait_closed()
        return sink.dropped

    assert asyncio.run(main()) == 2
    assert [e["message_id"] for e in read_trace_events(tmp_path)] == ["m-3"]


def test_the_process_sink_writes_batches_and_single_events_in_order(tmp_path):
    async def main():
        sink = await ProcessTraceSink(tmp_path, node_id="n1", cluster="c", nice=0).start()
        messages = [_message(1, "m-1"), _message(2, "m-2")]
        sink.emit_messages("published", "t", messages, app_id="shop", client_host="h", ts_us=10)
        sink.emit_messages("stored", "t", messages, app_id="shop", client_host="h", ts_us=11)
        sink.emit("nacked", message_id="m-1", topic="t", message_type="normal", group="g", attempt=1,
                  detail="busy", ts_us=12)
        sink.emit_group("delivered", "t", "g", [(2, 1, messages[1].fields)], consumer="c-1", client_host="h2",
                        ts_us=13)
        sink.close()
        await sink.wait_closed()
        return sink.dropped

    assert asyncio.run(main()) == 0
    assert [(e["event"], e["message_id"], e["ts_us"]) for e in read_trace_events(tmp_path)] == [
        ("published", "m-1", 10), ("published", "m-2", 10), ("stored", "m-1", 11), ("stored", "m-2", 11),
        ("nacked", "m-1", 12), ("delivered", "m-2", 13)]
    assert [p.suffix for p in _files(tmp_path)] == [".arrows"]


def test_the_trace_process_writes_the_frames_it_reads_and_stops_at_their_end(tmp_path):
    """The child process the broker starts (python -m broker_core.tracing.process), fed as the broker feeds
    it: length-prefixed msgpack frames of records."""
    m1, m2 = _message(1, "m-1", key="k1"), _message(2, "m-2")
    shipper = RecordBuffer()
    published = shipper.emit_messages("published", "orders", [m1, m2], app_id="shop", ts_us=90)
    first = frame(shipper.take_records())
    shipper.emit_messages("stored", "orders", [m1, m2], app_id="shop", ts_us=100, same_as=published)
    shipper.emit_attempts("acked", "orders", "billing", [(m2, 2, 0.0)], consumer="c-1", client_host="10.0.0.2:2",
                          ts_us=200)
    child = subprocess.run([sys.executable, "-m", "broker_core.tracing.process", str(tmp_path), "n1", "c", "0"],
                           input=first + frame(shipper.take_records()), timeout=60)
    assert child.returncode == 0
    assert [(e["event"], e["message_id"], e.get("key"), e.get("group"), e.get("attempt"))
            for e in read_trace_events(tmp_path)] == [
        ("published", "m-1", "k1", None, None), ("published", "m-2", None, None, None),
        ("stored", "m-1", "k1", None, None), ("stored", "m-2", None, None, None), ("acked", "m-2", None, "billing", 2)]


def _records_table(rows):
    schema = records_schema()
    columns = {f.name: [r.get(f.name) for r in rows] for f in schema}
    return pa.Table.from_pydict(columns, schema=schema)


def test_a_file_of_records_reads_back_as_its_events_named_runs_taking_the_named_messages():
    """Hand-made format 2: a published batch of two, a second one of one with a key, a `stored` record
    naming the first, and a delivery naming the second message of the first and the one of the second."""
    base = {"v": 2, "topic": "t", "cluster": "c", "broker": "n1", "event_id_prefix": "0123456789abcdef"}
    table = _records_table([
        {**base, "record": 7, "count": 2, "event_id_first": 1, "ts_us": 10, "event": "published", "app_id": "shop",
         "message_id": ["m-1", "m-2"], "message_type": ["a", "b"], "size": [3, 4]},
        {**base, "record": 8, "count": 1, "event_id_first": 3, "ts_us": 11, "event": "published", "app_id": "shop",
         "message_id": ["m-3"], "message_type": ["a"], "key": ["k"], "size": [5]},
        {**base, "record": 9, "count": 2, "event_id_first": 4, "ts_us": 12, "event": "stored", "app_id": "shop",
         "refs": [{"record": 7, "offset": 0, "count": 2}]},
        {**base, "record": 10, "count": 2, "event_id_first": 6, "ts_us": 13, "event": "delivered", "group": "g",
         "refs": [{"record": 7, "offset": 1, "count": 1}, {"record": 8, "offset": 0, "count": 1}],
         "attempt": [1, 2]},
    ])
    rows = [{k: v for k, v in r.items() if v is not None} for r in records_to_events(table).to_pylist()]
    same = {"v": 1, "topic": "t", "cluster": "c", "broker": "n1"}
    ids = [f"0123456789abcdef{i:016x}" for i in range(1, 8)]
    assert rows == [
        {**same, "event_id": ids[0], "ts_us": 10, "event": "published", "message_id": "m-1", "message_type": "a",
         "app_id": "shop", "size": 3},
        {**same, "event_id": ids[1], "ts_us": 10, "event": "published", "message_id": "m-2", "message_type": "b",
         "app_id": "shop", "size": 4},
        {**same, "event_id": ids[2], "ts_us": 11, "event": "published", "message_id": "m-3", "message_type": "a",
         "key": "k", "app_id": "shop", "size": 5},
        {**same, "event_id": ids[3], "ts_us": 12, "event": "stored", "message_id": "m-1", "message_type": "a",
         "app_id": "shop"},
        {**same, "event_id": ids[4], "ts_us": 12, "event": "stored", "message_id": "m-2", "message_type": "b",
         "app_id": "shop"},
        {**same, "event_id": ids[5], "ts_us": 13, "event": "delivered", "message_id": "m-2", "message_type": "b",
         "group": "g", "attempt": 1},
        {**same, "event_id": ids[6], "ts_us": 13, "event": "delivered", "message_id": "m-3", "message_type": "a",
         "key": "k", "group": "g", "attempt": 2},
    ]


def test_a_record_naming_a_record_not_in_its_file_or_past_its_messages_is_refused():
    base = {"v": 2, "topic": "t", "cluster": "c", "broker": "n1", "event_id_prefix": "0123456789abcdef", "ts_us": 1}
    published = {**base, "record": 1, "count": 1, "event_id_first": 1, "event": "published", "message_id": ["m-1"],
                 "message_type": ["a"]}
    for runs in ([{"record": 5, "offset": 0, "count": 1}], [{"record": 1, "offset": 1, "count": 1}]):
        table = _records_table([published, {**base, "record": 2, "count": 1, "event_id_first": 2, "event": "stored",
                                            "refs": runs}])
        with pytest.raises(ValueError, match="names record"):
            records_to_events(table)
    short = _records_table([published, {**base, "record": 2, "count": 2, "event_id_first": 2, "event": "stored",
                                         "refs": [{"record": 1, "offset": 0, "count": 1}]}])
    with pytest.raises(ValueError, match="do not add up"):
        records_to_events(short)


def test_names_stay_names_within_a_file_and_become_values_across_a_roll(tmp_path):
    """A `stored` record naming its `published` record of the same file ships no ids; one whose
    `published` record went to the file before (a roll between the two batches) gets the values."""
    batch = [_message(1, "m-1", key="k1"), _message(2, "m-2")]
    shipper = RecordBuffer()
    handle = shipper.emit_messages("published", "t", batch, app_id="shop", ts_us=1)
    shipper.emit_messages("stored", "t", batch, app_id="shop", ts_us=2, same_as=handle)
    both = shipper.take()
    later = [_message(3, "m-3")]
    handle = shipper.emit_messages("published", "t", later, app_id="shop", ts_us=3)
    first_chunk = shipper.take()
    shipper.emit_messages("stored", "t", later, app_id="shop", ts_us=4, same_as=handle)
    second_chunk = shipper.take()
    writer = TraceFileWriter(tmp_path, node_id="n1", cluster="c")
    for chunk in (both, first_chunk):
        writer.write(chunk)
    writer.flush(roll=True)
    writer.write(second_chunk)
    writer.close()
    one, two = sorted(tmp_path.glob("*.arrows"))
    stored_here = read_records(str(one)).to_pylist()[1]
    assert stored_here["event"] == "stored" and stored_here["message_id"] is None and stored_here["refs"] == [
        {"record": 0, "offset": 0, "count": 2}]
    (stored_later,) = read_records(str(two)).to_pylist()
    assert stored_later["refs"] is None and stored_later["message_id"] == ["m-3"]
    assert [(e["event"], e["message_id"], e.get("key")) for e in read_trace_events(tmp_path)] == [
        ("published", "m-1", "k1"), ("published", "m-2", None), ("stored", "m-1", "k1"), ("stored", "m-2", None),
        ("published", "m-3", None), ("stored", "m-3", None)]


def test_a_files_event_count_comes_from_its_footer_and_record_counts(tmp_path):
    batch = [_message(i, f"m-{i}") for i in (1, 2, 3)]
    shipper = RecordBuffer()
    handle = shipper.emit_messages("published", "t", batch, ts_us=1)
    shipper.emit_messages("stored", "t", batch, ts_us=2, same_as=handle)
    writer = TraceFileWriter(tmp_path / "two", node_id="n1", cluster="c")
    shipper.emit("nacked", message_id="m-1", topic="t", message_type="normal", ts_us=3)
    writer.write(shipper.take())
    writer.close()
    (records,) = (tmp_path / "two").glob("*.arrows")
    assert read_records(str(records)).num_rows == 3 and event_count(str(records)) == 7
