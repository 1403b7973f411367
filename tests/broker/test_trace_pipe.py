"""Trace records as the broker ships them: a publish batch as its messages' values, a column at a time (ids,
keys and business ids joined by NUL, a type shared by all as one value), no message's bytes; a delivery or
ack frame as its seqs, which the trace process (records.Decoder) turns into references to the published
records. Every step comes out with its values; shipments go out in short steps when records pile up; a
trace process that dies does not stop publishing."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
from pathlib import Path

import pyarrow as pa

from broker_core.client import Consumer, Message, Producer
from broker_core.storage.store import StoredMessage
from broker_core.tracing.process import HEAD, PipeWriter, ProcessTraceSink, joined, serve
from broker_core.tracing.records import Decoder, Joined, RecordBuffer, Run, pack, read_parts, unpack
from broker_core.tracing.schema import read_trace_events
from broker_core.tracing.writer import TraceFileWriter
from tests.broker.conftest import APP, wait_for
from tests.broker.helpers import Received


def _batch(first_seq: int, specs: list[tuple]) -> list[StoredMessage]:
    """StoredMessages from (id, type, key, business id, body)."""
    arrays = [[mid, mtype, key, bid, {"h": "v"}, body, 0, 0, 0, 1_700_000_000_000]
              for mid, mtype, key, bid, body in specs]
    return [StoredMessage(first_seq + i, a, "shop", 1234, ("g",)) for i, a in enumerate(arrays)]


def _every_step(buffer: RecordBuffer) -> list[bytes]:
    """Every kind of step of two publish batches, shipped in two frames (as the sink ships them)."""
    one = _batch(1, [("m-1", "order.created", "k1", "b1", b"BODY-12345"),
                     ("m-2", "order.paid", None, "b2", b"BODY-12"),
                     ("m-ü", "order.paid", "", None, b"")])
    two = _batch(4, [("m-4", "order.paid", None, None, b"abc"), ("m-5", "order.paid", None, None, b"xyz")])
    shipped = []
    handle = buffer.emit_messages("published", "t", one, app_id="shop", client_host="h:1", ts_us=10)
    buffer.emit_messages("stored", "t", one, app_id="shop", client_host="h:1", ts_us=11, same_as=handle)
    shipped.append(_shipped(buffer))
    handle = buffer.emit_messages("published", "t", two, app_id="shop", client_host="h:1", ts_us=12)
    buffer.emit_messages("stored", "t", two, app_id="shop", client_host="h:1", ts_us=13, same_as=handle)
    everything = one + two
    buffer.emit_group("delivered", "t", "g", [(m.seq, 1, m.fields) for m in everything], consumer="c-1",
                      client_host="h:2", ts_us=20)
    buffer.emit_attempts("acked", "t", "g", [(m, 1, 0.0) for m in everything[:2]], consumer="c-1",
                         client_host="h:2", ts_us=21)
    m = everything[2]
    buffer.emit("nacked", message_id=m.id, topic="t", message_type=m.message_type, key=m.key, group="g",
                consumer="c-1", attempt=1, detail="retry", ts_us=22)
    buffer.emit_group("delivered", "t", "g", [(m.seq, 2, m.fields) for m in everything[4:1:-1]], consumer="c-2",
                      client_host="h:3", ts_us=23)  # a retry: second attempts, out of seq order
    buffer.emit_attempts("acked", "t", "g", [(m, 2, 0.0) for m in everything[3:]], consumer="c-2",
                         client_host="h:3", ts_us=24)
    buffer.emit("dead_lettered", message_id=m.id, topic="t", message_type=m.message_type, group="g", attempt=2,
                detail="delivery limit", ts_us=25)
    prepared = _batch(6, [("p-6", "order.held", "k6", "b6", b"123")])
    buffer.emit_messages("prepared", "t", prepared, app_id="shop", client_host="h:1", ts_us=26)
    buffer.emit("committed", message_id="p-6", topic="t", message_type="order.held", key="k6", business_id="b6",
                detail="reason=commit from_check=false", ts_us=27)
    shipped.append(_shipped(buffer))
    return shipped


def _shipped(buffer: RecordBuffer) -> bytes:
    """What the sink writes to the pipe after a frame's length: the records' msgpack."""
    return pack(buffer.take_records())


def _written(folder: Path, shipped: list[bytes]) -> list[dict]:
    writer = TraceFileWriter(folder, node_id="n1", cluster="c")
    decoder = Decoder()
    for packed in shipped:
        writer.write(decoder.batch(unpack(packed)))
    writer.close()
    assert writer.dropped == 0
    return _events(folder)


def _events(folder: Path) -> list[dict]:
    """The events written in `folder`, without their event ids (random per writer)."""
    rows = read_trace_events(folder)
    for row in rows:
        assert len(row.pop("event_id")) == 32
    return rows


def test_every_step_is_written_with_its_messages_values_and_no_body_is_shipped(tmp_path):
    """published, stored, delivered, acked, a retry (nacked, delivered again out of order), dead_lettered,
    prepared and committed: each event with its message's values (delivery and ack frames shipped as seqs
    only, named by the trace process); the shipments hold no body."""
    shipped = _every_step(RecordBuffer())
    assert not any(b"BODY-" in packed for packed in shipped)
    from_bytes = _written(tmp_path / "written", shipped)
    assert [(r["event"], r["message_id"], r.get("attempt")) for r in from_bytes if r["event"] != "published"] == [
        ("stored", "m-1", None), ("stored", "m-2", None), ("stored", "m-ü", None),
        ("stored", "m-4", None), ("stored", "m-5", None),
        *[("delivered", i, 1) for i in ("m-1", "m-2", "m-ü", "m-4", "m-5")],
        ("acked", "m-1", 1), ("acked", "m-2", 1), ("nacked", "m-ü", 1),
        ("delivered", "m-5", 2), ("delivered", "m-4", 2), ("delivered", "m-ü", 2),
        ("acked", "m-4", 2), ("acked", "m-5", 2), ("dead_lettered", "m-ü", 2),
        ("prepared", "p-6", None), ("committed", "p-6", None)]
    published = {r["message_id"]: r for r in from_bytes if r["event"] == "published"}
    assert {i: (r["message_type"], r.get("key"), r.get("business_id"), r["size"], r["app_id"], r["ts_us"])
            for i, r in published.items()} == {
        "m-1": ("order.created", "k1", "b1", 10, "shop", 10), "m-2": ("order.paid", None, "b2", 7, "shop", 10),
        "m-ü": ("order.paid", "", None, 0, "shop", 10), "m-4": ("order.paid", None, None, 3, "shop", 12),
        "m-5": ("order.paid", None, None, 3, "shop", 12)}
    delivered = [r for r in from_bytes if r["event"] == "delivered" and r["attempt"] == 2]
    assert [(r["message_id"], r["message_type"], r.get("key"), r["consumer"]) for r in delivered] == [
        ("m-5", "order.paid", None, "c-2"), ("m-4", "order.paid", None, "c-2"), ("m-ü", "order.paid", "", "c-2")]


def test_the_shipped_publish_batch_holds_its_values_a_column_at_a_time_and_frames_their_seqs_only():
    buffer = RecordBuffer()
    messages = _batch(1, [("m-1", "a", None, "b-1", b"1"), ("m-2", "a", None, "b-2", b"2")])
    buffer.emit_messages("published", "t", messages, ts_us=1)
    buffer.emit_group("delivered", "t", "g", [(m.seq, 1, m.fields) for m in messages], ts_us=2)
    buffer.emit_attempts("acked", "t", "g", [(m, 1, 0.0) for m in messages[::-1]], ts_us=3)
    records = buffer.take_records()
    assert records.seqs[0] == 1
    # ids and business ids one NUL-joined text each, the shared type one value, no key, equal sizes one value
    assert [column[0] for column in read_parts(records).parts] == [Joined("m-1\0m-2", 2), Run("a", 2), None,
                                                                   Joined("b-1\0b-2", 2), None, Run(1, 2)]
    assert [column[i] for column in records.parts[:4] for i in (1, 2)] == [None] * 8
    assert records.seqs[1] == [1, 2]  # one run in order: its first seq and count
    assert records.seqs[2] == (2).to_bytes(8, "little") + (1).to_bytes(8, "little")  # else each seq
    batch = Decoder().batch(unpack(pack(records)))
    assert batch.column("message_id").to_pylist() == [["m-1", "m-2"], None, None]
    assert batch.column("refs").to_pylist()[1:] == [[{"record": 0, "offset": 0, "count": 2}],
                                                    [{"record": 0, "offset": 1, "count": 1},
                                                     {"record": 0, "offset": 0, "count": 1}]]


def test_the_sink_ships_at_once_when_records_pile_up_not_at_its_interval(tmp_path):
    messages = [StoredMessage(i, [f"m-{i}", "a", None, None, None, b"x", 0, 0, 0, 0], "shop", 0, ("g",))
                for i in range(1, 4)]

    async def main():
        sink = await ProcessTraceSink(tmp_path, node_id="n1", cluster="c", nice=0, ship_interval_s=3600,
                                      ship_records=2).start()
        handle = sink.emit_messages("published", "t", messages, ts_us=1)
        assert sink._buffer.records == 1
        sink.emit_messages("stored", "t", messages, ts_us=2, same_as=handle)
        await asyncio.sleep(0)  # one loop turn: the shipment
        left = sink._buffer.records
        sink.close()
        await sink.wait_closed()
        return left

    assert asyncio.run(main()) == 0
    assert [(e["event"], e["message_id"]) for e in read_trace_events(tmp_path)] == [
        *[("published", f"m-{i}") for i in (1, 2, 3)], *[("stored", f"m-{i}") for i in (1, 2, 3)]]


def test_a_column_of_strings_holding_a_nul_or_another_type_ships_as_its_values():
    """Keys joined by NUL only when none holds one; a null among them, a NUL in one, or a value of another
    type: the values as they are. The written events hold each value as sent."""
    buffer = RecordBuffer()
    messages = _batch(1, [("m-1", "a", "k\0x", None, b""), ("m-2", "b", "k2", 7, b""), ("m-3", "a", None, "b3", b"")])
    buffer.emit_messages("published", "t", messages, ts_us=1)
    records = unpack(pack(buffer.take_records()))
    assert [column[0] for column in records.parts[:4]] == [Joined("m-1\0m-2\0m-3", 3), Joined("a\0b\0a", 3),
                                                           ["k\0x", "k2", None], [None, 7, "b3"]]
    batch = Decoder().batch(records)
    assert batch.column("key").to_pylist() == [["k\0x", "k2", None]]
    assert batch.column("business_id").to_pylist() == [[None, "7", "b3"]]
    assert batch.column("message_type").to_pylist() == [["a", "b", "a"]]


def test_strings_of_several_records_split_in_one_pass_keep_each_value_and_one_holding_a_nul():
    """A column's strings of several records decoded at once (one text split by NUL): every record's values in
    order, also empty ones; a value holding a NUL (a key shared by a whole batch, or one among others) is not
    cut in two."""
    buffer = RecordBuffer()
    buffer.emit_messages("published", "t", _batch(1, [("m-1", "a", "k1", "", b""), ("m-2", "b", "", "b2", b"")]),
                         ts_us=1)
    buffer.emit_messages("published", "t", _batch(3, [("m-3", "a", "k\0x", "b3", b""), ("m-4", "a", "k\0x", "b4", b"")]),
                         ts_us=2)
    buffer.emit_messages("published", "t", _batch(5, [("m-5", "c", "k5", "b\0z", b""), ("m-6", "c", "k6", "b6", b"")]),
                         ts_us=3)
    batch = Decoder().batch(unpack(pack(buffer.take_records())))
    assert batch.column("message_id").to_pylist() == [["m-1", "m-2"], ["m-3", "m-4"], ["m-5", "m-6"]]
    assert batch.column("message_type").to_pylist() == [["a", "b"], ["a", "a"], ["c", "c"]]
    assert batch.column("key").to_pylist() == [["k1", ""], ["k\0x", "k\0x"], ["k5", "k6"]]
    assert batch.column("business_id").to_pylist() == [["", "b2"], ["b3", "b4"], ["b\0z", "b6"]]


def test_the_sink_ships_its_first_record_after_its_interval_also_after_shipping_at_once(tmp_path):
    """A first record is shipped `ship_interval_s` after it was added, also the first one after a shipment made
    at once (a full buffer): nothing waits for more records to come."""
    messages = [StoredMessage(i, [f"m-{i}", "a", None, None, None, b"x", 0, 0, 0, 0], "shop", 0, ("g",))
                for i in range(1, 3)]

    async def main():
        sink = await ProcessTraceSink(tmp_path, node_id="n1", cluster="c", nice=0, ship_interval_s=0.05,
                                      ship_records=2).start()
        for ts in (1, 2):  # two records: shipped at once
            sink.emit_messages("published", "t", messages, ts_us=ts)
        await asyncio.sleep(0)
        assert sink._buffer.records == 0
        sink.emit_messages("published", "t", messages, ts_us=3)  # one record: shipped by the timer
        for _ in range(200):
            if not sink._buffer.records:
                break
            await asyncio.sleep(0.01)
        left = sink._buffer.records
        sink.close()
        await sink.wait_closed()
        return left

    assert asyncio.run(main()) == 0
    assert [e["ts_us"] for e in read_trace_events(tmp_path)] == [1, 1, 2, 2, 3, 3]


def test_the_trace_process_decodes_the_frames_waiting_in_its_pipe_as_one_batch(tmp_path):
    """Two frames waiting in the pipe: one Arrow batch in the open file (its fixed costs paid once), and
    event for event what decoding them one by one gives."""
    shipped = _every_step(RecordBuffer())
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"".join(HEAD.pack(len(packed)) + packed for packed in shipped))
    os.close(write_fd)
    writer = TraceFileWriter(tmp_path / "waiting", node_id="n1", cluster="c")
    serve(read_fd, writer)
    os.close(read_fd)
    (open_file,) = (tmp_path / "waiting").glob("*.arrows.open")
    with pa.ipc.open_stream(open_file) as stream:
        assert [batch.num_rows for batch in stream] == [sum(len(unpack(s).counts) for s in shipped)]
    writer.close()
    assert _events(tmp_path / "waiting") == _written(tmp_path / "one-by-one", shipped)


def test_the_trace_process_writes_its_batches_without_pandas_and_with_glibcs_malloc(tmp_path):
    """pyarrow imports pandas, when it is installed, on its first array; that import cost the trace process
    about 0.3 s of CPU and 60 MB, at its first batch. The trace process refuses it: once it has written a
    batch, no pandas library is mapped in it (pyarrow's are). Arrow allocates through glibc's malloc there (its
    default, mimalloc, cost the process half its CPU in page faults)."""
    assert importlib.util.find_spec("pandas") is not None  # (installed here: the import would happen)
    messages = [StoredMessage(i, [f"m-{i}", "a", None, None, None, b"x", 0, 0, 0, 0], "shop", 0, ("g",))
                for i in range(1, 4)]

    async def main():
        sink = await ProcessTraceSink(tmp_path, node_id="n1", cluster="c", nice=0, ship_interval_s=3600).start()
        sink.emit_messages("published", "t", messages, ts_us=1)
        sink.ship()
        wait_for(lambda: _batches_open(tmp_path) == 1, 10, "the trace process to write the batch")
        maps = Path(f"/proc/{sink._proc.pid}/maps").read_text()
        environ = Path(f"/proc/{sink._proc.pid}/environ").read_bytes().split(b"\0")
        sink.close()
        await sink.wait_closed()
        return maps, environ

    maps, environ = asyncio.run(main())
    assert b"ARROW_DEFAULT_MEMORY_POOL=system" in environ
    assert "/pyarrow/" in maps
    assert "/pandas/" not in maps
    assert [e["message_id"] for e in read_trace_events(tmp_path)] == ["m-1", "m-2", "m-3"]


def _batches_open(directory: Path) -> int:
    """The complete batches in the open trace file (0 while there is none)."""
    for open_file in directory.glob("*.arrows.open"):
        try:
            with pa.ipc.open_stream(open_file) as stream:
                return sum(1 for _ in stream)
        except (pa.ArrowInvalid, OSError):
            return 0
    return 0


def test_records_dropped_between_two_takes_part_the_takes_joined():
    buffer = RecordBuffer()
    messages = _batch(1, [("m-1", "a", None, None, b"1")])
    takes = []
    for drop in (False, True, False, False):
        buffer.emit_messages("published", "t", messages, ts_us=1)
        if drop:
            buffer.drop()
        else:
            takes.append(unpack(_shipped(buffer)))
    assert [(r.first, len(r.counts)) for r in joined(takes)] == [(0, 1), (2, 2)]


def test_the_pipe_writer_writes_every_part_in_order_past_a_full_pipe_and_drops_them_once_the_reader_is_gone():
    """8 MiB of parts into a 64 KiB pipe read slowly: byte for byte, in order, then closed (the reader sees
    its end); a writer whose reader closed its end is closing and takes no more."""
    parts = [bytes([i % 251]) * (1000 + i % 97) for i in range(8000)]

    async def main():
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        writer = PipeWriter(loop, write_fd)
        writer.writelines(parts[:4000])
        assert writer.get_write_buffer_size() > 0  # the pipe took what it holds; the rest waits
        writer.writelines(parts[4000:])
        writer.close()
        got = bytearray()

        async def read_all():
            while chunk := await loop.run_in_executor(None, os.read, read_fd, 1 << 20):
                got.extend(chunk)

        await asyncio.wait_for(read_all(), 30)  # (the end comes once the writer closed)
        os.close(read_fd)
        assert got == b"".join(parts) and writer.get_write_buffer_size() == 0

        read_fd, write_fd = os.pipe()
        writer = PipeWriter(loop, write_fd)
        os.close(read_fd)
        writer.writelines([b"x" * 10])
        assert writer.is_closing() and writer.get_write_buffer_size() == 0

    asyncio.run(main())


def _trace_child(broker_pid: int) -> int:
    children = Path(f"/proc/{broker_pid}/task/{broker_pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_publishing_goes_on_after_the_trace_process_is_killed(cluster):
    """kill -9 of the trace process: every publish is still acknowledged and delivered; the broker only
    stops recording: what it can no longer ship is dropped and counted (/stats, /metrics). The trace process
    runs only on a core nothing else wants (SCHED_IDLE)."""
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    child = _trace_child(broker.proc.pid)
    wait_for(lambda: os.sched_getscheduler(child) == os.SCHED_IDLE, 10, "the trace process at idle priority")
    with Producer(**cluster.client_kwargs()) as producer:
        before = producer.send_many("orders", [Message(b"a" * 10) for _ in range(50)])
        assert broker.stats()["trace"]["dropped"] == 0
        os.kill(child, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{child}").exists() or
                 Path(f"/proc/{child}/stat").read_text().split()[2] == "Z", 10, "the trace process to die")
        after = [producer.send("orders", b"b" * 10) for _ in range(200)]
        after += producer.send_many("orders", [Message(b"c" * 10) for _ in range(500)])
    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: got.count("c") >= 750, 20, "every message delivered")
    assert set(got.ids("c")) == {*before, *after}
    assert broker.proc.poll() is None
    wait_for(lambda: broker.stats()["trace"]["dropped"] > 0, 10, "dropped trace events counted")
    dropped = broker.stats()["trace"]["dropped"]
    metric = next(line for line in broker.http("/metrics").decode().splitlines()
                  if line.startswith("switchyard_broker_trace_events_dropped_total{"))
    assert float(metric.rsplit(" ", 1)[1]) >= dropped > 0
    broker.stop()


def test_columns_of_runs_decode_to_each_records_value_repeated():
    """Records whose type, attempts and sizes are runs (one value for the record) come out value by value
    with each record's own value: several records, a non-ASCII type, a run of a value of another type (a
    business id sent as a number comes out as its text)."""
    buffer = RecordBuffer()
    buffer.emit_messages("published", "t", _batch(1, [("m-1", "tÿpe", None, 7, b"ab"), ("m-2", "tÿpe", None, 7,
                                                                                         b"cd")]), ts_us=1)
    buffer.emit_messages("published", "t", _batch(3, [(f"m-{i}", "other", None, None, b"xyz") for i in (3, 4, 5)]),
                         ts_us=2)
    buffer.emit_messages("prepared", "t", _batch(6, [("m-6", "o", None, None, b"")]), ts_us=3)
    records = unpack(pack(buffer.take_records()))
    assert [type(part) for part in records.parts[1]] == [Run, Run, Run]  # the types: a run per record
    batch = Decoder().batch(records)
    assert batch.column("message_type").to_pylist() == [["tÿpe"] * 2, ["other"] * 3, ["o"]]
    assert batch.column("business_id").to_pylist() == [["7", "7"], None, None]
    assert batch.column("size").to_pylist() == [[2, 2], [3, 3, 3], [0]]
    buffer.emit_group("delivered", "t", "g", [(seq, 1, None) for seq in (1, 2, 3)], ts_us=4)
    buffer.emit_group("delivered", "t", "g", [(seq, 1, None) for seq in (4, 5)], ts_us=5)
    later = Decoder()
    later.batch(records)
    frames = unpack(pack(buffer.take_records()))
    assert frames.parts[4] == [Run(1, 3), Run(1, 2)]  # first attempts: a run per frame
    assert later.batch(frames).column("attempt").to_pylist() == [[1, 1, 1], [1, 1]]
