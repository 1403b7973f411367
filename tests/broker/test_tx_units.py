"""Transaction and re-drive pieces without sockets: the new frames, and both stores on their own
(prepare / commit / rollback / re-drive, recovery of each, segment deletion held by a prepared message)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_core import protocol as p
from broker_core.storage.file_store import FileStore
from broker_core.storage.memory_store import MemoryStore
from broker_core.storage.store import KIND_REDRIVEN, encode_record
from tests.broker.test_file_store import Loop
from tests.broker.test_protocol import roundtrip


@pytest.fixture
def executor():
    ex = ThreadPoolExecutor(2)
    yield ex
    ex.shutdown(wait=True)


# -- protocol -------------------------------------------------------------------------------------

@pytest.mark.parametrize("event, receiver", [
    (p.EndTx(3, "orders", "id-1", True), p.SERVER),
    (p.EndTx(4, "orders", "id-1", False), p.SERVER),
    (p.TxState(9, "id-1", "rollback"), p.SERVER),
    (p.TxEnded(3, "id-1", "committed", True), p.CLIENT),
    (p.CheckTx(9, "orders", "id-1", "order.created", "k", None, {"h": "v"}), p.CLIENT),
])
def test_transaction_frames_round_trip(event, receiver):
    assert roundtrip(event, receiver) == event


def test_transaction_codes_come_from_the_reserved_range_and_the_rest_stays_reserved():
    codes = {p.EndTx.code, p.TxEnded.code, p.CheckTx.code, p.TxState.code}
    assert codes <= set(range(12, 20)) and len(codes) == 4
    assert not codes & p.RESERVED_CODES
    assert 19 in p.RESERVED_CODES and 27 in p.RESERVED_CODES


@pytest.mark.parametrize("event, receiver", [
    (p.CheckTx(1, "t", "id", "x", None, None, {}), p.SERVER),  # only the broker asks
    (p.TxEnded(1, "id", "committed", True), p.SERVER),
    (p.EndTx(1, "t", "id", True), p.CLIENT),  # only a client ends a transaction
    (p.TxState(1, "id", "commit"), p.CLIENT),
])
def test_transaction_frames_refused_from_the_wrong_side(event, receiver):
    conn = p.Connection(receiver)
    conn.receive_data(p.encode_frame(event))
    with pytest.raises(p.ProtocolError):
        conn.next_event()


def test_malformed_end_tx_is_refused():
    import msgpack

    body = msgpack.packb([1, "orders", "id-1", "yes"])  # commit must be a bool
    conn = p.Connection(p.SERVER)
    conn.receive_data(p.HEADER.pack(b"SY", 1, p.EndTx.code, len(body)) + body)
    with pytest.raises(p.ProtocolError):
        conn.next_event()


def test_hello_carries_the_check_listener_feature():
    hello = roundtrip(p.Hello(1, "c", "app", "s", 1000, {p.FEATURE_CHECK_LISTENER: True}), p.SERVER)
    assert hello.features == {"check_listener": True}


# -- stores ----------------------------------------------------------------------------------------

def prepared_arrays(n: int, start: int = 0) -> list[list]:
    return [p.message(f"tx{i}", "t", b"body %d" % i, flags=p.FLAG_PREPARED) for i in range(start, start + n)]


def open_file_store(path, loop, executor, **kw) -> tuple[FileStore, list]:
    store = FileStore(path, executor=executor, notify=loop.notify, **kw)
    owed = store.recover()
    return store, owed


def settle(loop, store, calls: list) -> None:
    loop.run(until=lambda: all(c for c in calls) and not store.busy)


def done_flag(calls: list):
    slot = []
    calls.append(slot)
    return lambda exc: slot.append(exc or "ok")


def test_file_store_recovers_prepared_committed_and_rolled_back(tmp_path, executor):
    loop = Loop()
    store, _ = open_file_store(tmp_path, loop, executor)
    calls: list = []
    store.prepare("app", 1000, prepared_arrays(3), 1, done_flag(calls))
    settle(loop, store, calls)
    store.end_tx(store.tx["tx0"], True, ("g1", "g2"), 2000, "producer", done_flag(calls))
    store.end_tx(store.tx["tx1"], False, (), 2000, "check", done_flag(calls))
    settle(loop, store, calls)
    assert set(store.prepared) == {"tx2"}
    store.close()

    store, owed = open_file_store(tmp_path, Loop(), executor)
    assert {e.message.id: e.state for e in store.tx.values()} == {
        "tx0": "committed", "tx1": "rolled_back", "tx2": "prepared"}
    assert set(store.prepared) == {"tx2"}
    assert [(m.id, groups) for m, groups in owed] == [("tx0", ("g1", "g2"))]  # only the committed one is owed
    assert store.tx["tx1"].reason == "check"
    store.close()


def test_a_segment_holding_a_prepared_message_is_not_deleted(tmp_path, executor):
    loop = Loop()
    store, _ = open_file_store(tmp_path, loop, executor, segment_bytes=200)
    calls: list = []
    store.prepare("app", 1000, prepared_arrays(1), 1, done_flag(calls))
    settle(loop, store, calls)
    first = store.active
    # plain messages beside it that the group finishes, then one more that rolls the segment:
    # without the prepared message the first segment would be deleted now
    messages = store.append("app", 1000, [p.message("m0", "t", b"x" * 300)], [("g",)], done_flag(calls))
    messages += store.append("app", 1000, [p.message("m1", "t", b"x" * 300)], [("g",)], done_flag(calls))
    settle(loop, store, calls)
    assert store.active is not first and messages[0].segment is first
    store.finish_many(messages, "g")
    for _ in range(3):
        store.tick(1e9)
        loop.run(until=lambda: not store.busy)
    assert first.log_path.exists(), "the segment of a prepared message must stay"
    store.end_tx(store.tx["tx0"], False, (), 2000, "exhausted", done_flag(calls))
    settle(loop, store, calls)
    loop.run(until=lambda: not first.log_path.exists() and not store.busy)
    assert "tx0" not in store.tx  # past retention once its segment went
    store.close()


def dead_letter_some(store, loop, n: int, group: str = "g") -> None:
    calls: list = []
    arrays = [p.message(f"d{i}", "t", b"dead body %d" % i) for i in range(n)]
    messages = store.append("app", 1000, arrays, [(group,)] * n, done_flag(calls))
    settle(loop, store, calls)
    for i, m in enumerate(messages):
        store.dead_letter(m, group, "delivery limit", 3, 5000 + i)
    store.tick(1e9)
    loop.run(until=lambda: not store.busy)


def test_file_store_redrive_is_durable_and_not_repeated(tmp_path, executor):
    loop = Loop()
    store, _ = open_file_store(tmp_path, loop, executor)
    dead_letter_some(store, loop, 4)
    assert store.dead_letter_count("g") == 4
    chosen = [d for d in store.dead_index.live["g"].values() if d.fields[p.M_ID] in ("d1", "d2")]
    with_bodies = store.dead_letter_bodies("g", chosen)
    assert sorted(d.fields[p.M_BODY] for d in with_bodies) == [b"dead body 1", b"dead body 2"]
    calls: list = []
    copies = store.redrive("g", with_bodies, 9000, done_flag(calls))
    settle(loop, store, calls)
    store.tick(1e9)
    loop.run(until=lambda: not store.busy)
    assert [m.groups for m in copies] == [("g",), ("g",)]
    assert store.dead_letter_count("g") == 2
    assert sorted(d.fields[p.M_ID] for d in store.dead_letters("g", 100)) == ["d0", "d3"]
    store.close()

    store, owed = open_file_store(tmp_path, Loop(), executor)
    assert sorted(m.id for m, groups in owed if m.received_ms == 9000) == ["d1", "d2"]
    assert store.dead_letter_count("g") == 2
    assert store.dead_index.redriven_ids("g") == {"d1", "d2"}
    store.close()


def test_redrive_markers_lost_in_a_crash_are_rewritten_from_the_log(tmp_path, executor):
    loop = Loop()
    store, _ = open_file_store(tmp_path, loop, executor)
    dead_letter_some(store, loop, 2)
    chosen = store.dead_letter_bodies("g", list(store.dead_index.live["g"].values()))
    calls: list = []
    store.redrive("g", chosen, 9000, done_flag(calls))
    settle(loop, store, calls)
    store.tick(1e9)
    loop.run(until=lambda: not store.busy)
    store.close()
    # the crash came between the durable log record and the markers: cut the markers off
    dlq = tmp_path / "deadletter" / "g.dlq"
    data = dlq.read_bytes()
    marker = len(encode_record(KIND_REDRIVEN, [1, 3, 9000]))
    dlq.write_bytes(data[:-2 * marker])

    store, _ = open_file_store(tmp_path, Loop(), executor)
    assert store.dead_letter_count("g") == 0, "the log record alone proves the re-drive happened"
    store.close()


def test_memory_store_prepares_commits_and_redrives():
    loop = Loop()
    store = MemoryStore(notify=loop.notify)
    calls: list = []
    store.prepare("app", 1000, prepared_arrays(2), 1, done_flag(calls))
    store.end_tx(store.tx["tx0"], True, ("g",), 2000, "producer", done_flag(calls))
    loop.run(until=lambda: all(calls))
    assert store.tx["tx0"].state == "committed" and store.tx["tx0"].message.groups == ("g",)
    assert set(store.prepared) == {"tx1"}
    m = store.append("app", 1, [p.message("x", "t", b"b")], [("g",)], done_flag(calls))[0]
    store.dead_letter(m, "g", "limit", 2, 10)
    dead = list(store.dead_index.live["g"].values())
    store.redrive("g", store.dead_letter_bodies("g", dead), 20, done_flag(calls))
    loop.run(until=lambda: all(calls))
    assert store.dead_letter_count("g") == 0 and store.dead_index.redriven_ids("g") == {"x"}
