"""The broker's trace writer: batches in memory, writes JSON lines, rolls by size and age with fsync + rename."""

import json
import time

from broker_core.trace_writer import JsonlTraceWriter


def _read(paths):
    return [json.loads(line) for p in sorted(paths) for line in p.read_text().splitlines()]


def test_events_are_written_as_json_lines_in_closed_files(tmp_path):
    writer = JsonlTraceWriter.for_data_dir(tmp_path, node_id="node-1", cluster="prod-a", flush_interval_s=60)
    writer.emit("published", message_id="m-1", topic="orders", message_type="normal", key="k\"1",
                business_id="order-7", app_id="shop", client_host="127.0.0.1:5000", size=12, ts_us=1000)
    writer.emit("delivered", message_id="m-1", topic="orders", message_type="normal", group="billing",
                consumer="c-9", attempt=1, ts_us=2000)
    assert list((tmp_path / "trace").iterdir()) == []  # nothing written on the caller's thread
    writer.close()

    files = list((tmp_path / "trace").iterdir())
    assert len(files) == 1
    assert files[0].name.startswith("trace-node-1-") and files[0].name.endswith("-000001.jsonl")
    events = _read(files)
    for e in events:
        assert len(e.pop("event_id")) == 32
    assert events == [
        {"v": 1, "ts_us": 1000, "event": "published", "message_id": "m-1", "topic": "orders",
         "message_type": "normal", "key": 'k"1', "business_id": "order-7", "app_id": "shop",
         "client_host": "127.0.0.1:5000", "size": 12, "cluster": "prod-a", "broker": "node-1"},
        {"v": 1, "ts_us": 2000, "event": "delivered", "message_id": "m-1", "topic": "orders",
         "message_type": "normal", "group": "billing", "consumer": "c-9", "attempt": 1,
         "cluster": "prod-a", "broker": "node-1"},
    ]


def test_event_ids_are_unique_across_writers_of_the_same_node(tmp_path):
    ids = set()
    for _ in range(2):
        writer = JsonlTraceWriter(tmp_path, node_id="n1", cluster="c", flush_interval_s=60)
        for i in range(100):
            writer.emit("stored", message_id=f"m-{i}", topic="t", message_type="normal")
        writer.close()
    for e in _read(tmp_path.glob("*.jsonl")):
        ids.add(e["event_id"])
    assert len(ids) == 200


def test_files_roll_by_size_and_only_closed_files_end_in_jsonl(tmp_path):
    writer = JsonlTraceWriter(tmp_path, node_id="n1", cluster="c", max_bytes=1000, flush_interval_s=60)
    for i in range(30):
        writer.emit("stored", message_id=f"m-{i}", topic="t", message_type="normal", ts_us=i + 1)
        writer.flush()
    open_files = list(tmp_path.glob("*.jsonl.open"))
    closed = list(tmp_path.glob("*.jsonl"))
    assert len(open_files) == 1 and len(closed) >= 2
    writer.close()
    assert list(tmp_path.glob("*.jsonl.open")) == []
    assert [e["ts_us"] for e in _read(tmp_path.glob("*.jsonl"))] == list(range(1, 31))


def test_the_background_thread_rolls_an_idle_file_by_age(tmp_path):
    writer = JsonlTraceWriter(tmp_path, node_id="n1", cluster="c", max_age_s=0.3, flush_interval_s=0.05)
    writer.emit("stored", message_id="m-1", topic="t", message_type="normal", ts_us=5)
    deadline = time.monotonic() + 10
    while not list(tmp_path.glob("*.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [e["message_id"] for e in _read(tmp_path.glob("*.jsonl"))] == ["m-1"]
    writer.close()


def test_a_file_left_open_by_a_killed_broker_is_closed_at_start_without_its_torn_line(tmp_path):
    left = tmp_path / "trace-n1-20250101T000000-000001.jsonl.open"
    left.write_text('{"v":1,"event_id":"a","message_id":"m-1"}\n{"v":1,"event_id":"b","mess')
    writer = JsonlTraceWriter(tmp_path, node_id="n1", cluster="c", flush_interval_s=60)
    writer.close()
    assert not left.exists()
    recovered = tmp_path / "trace-n1-20250101T000000-000001.jsonl"
    assert recovered.read_text() == '{"v":1,"event_id":"a","message_id":"m-1"}\n'


def test_when_the_memory_bound_is_reached_events_are_dropped_and_counted(tmp_path):
    writer = JsonlTraceWriter(tmp_path, node_id="n1", cluster="c", flush_interval_s=60, max_pending=3)
    for i in range(5):
        writer.emit("stored", message_id=f"m-{i}", topic="t", message_type="normal")
    assert writer.dropped == 2
    writer.close()
    assert len(_read(tmp_path.glob("*.jsonl"))) == 3
