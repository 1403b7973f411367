"""The file store on its own (no network): group commit, recovery, torn tails, segment deletion."""

from __future__ import annotations

import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_core.protocol import message
from broker_core.storage.file_store import FileStore
from broker_core.storage.memory_store import MemoryStore


class Loop:
    """Stands in for the event loop: `notify` queues callbacks, `run` executes them."""

    def __init__(self):
        self.q: queue.Queue = queue.Queue()

    def notify(self, fn, *args):
        self.q.put((fn, args))

    def run(self, until=lambda: False, timeout: float = 5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                fn, args = self.q.get(timeout=0.01)
            except queue.Empty:
                if until():
                    return
                continue
            fn(*args)
            if until():
                return
        raise AssertionError("loop did not reach its condition")


@pytest.fixture
def executor():
    ex = ThreadPoolExecutor(2)
    yield ex
    ex.shutdown(wait=True)


def batch(n: int, start: int = 0, groups=("g1", "g2"), size: int = 100):
    """(message arrays, groups of each) as Topic.publish hands them to a store."""
    arrays = [message(f"m{i}", "t", f"{i}".encode().ljust(size, b".")) for i in range(start, start + n)]
    return arrays, [tuple(groups)] * n


def open_store(path, loop, executor, **kw) -> FileStore:
    store = FileStore(path, executor=executor, notify=loop.notify, **kw)
    store.recover()
    return store


def append_all(store, loop, batches):
    done, messages = [], []
    for b in batches:
        messages += store.append("app", 1, *b, done.append)
    loop.run(lambda: len(done) == len(batches))
    assert done == [None] * len(batches)
    return messages


def test_publishes_during_a_flush_share_the_next_fsync(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor)
    append_all(store, loop, [batch(1, i) for i in range(200)])
    # the first append starts a flush; the others queue behind it and go out together
    assert store.fsyncs < 20, store.stats()
    store.close()


def append_watched(store, loop, count: int) -> list[dict]:
    """Append `count` one-message records; each entry says where its record ends (segment, byte offset)
    and, once its done-callback ran, what the store had synced of that segment and its fsync count then."""
    records = []
    for i in range(count):
        entry = {}
        fsyncs_before = store.fsyncs

        def done(exc, entry=entry):
            entry.update(error=exc, synced=entry["segment"].synced, fsyncs=store.fsyncs, at=time.monotonic())

        (m,) = store.append("app", 1, *batch(1, i), done)
        entry.update(message=m, segment=m.segment, end=m.segment.size, fsyncs_before=fsyncs_before)
        records.append(entry)
    loop.run(lambda: all("at" in e for e in records))
    assert [e["error"] for e in records] == [None] * count
    return records


def run_ticking(store, loop, condition, timeout: float) -> None:
    """Run the loop while ticking the store every ~10 ms, as the broker's timer does."""
    def ticked():
        store.tick(time.monotonic())
        return condition()

    loop.run(ticked, timeout)


def test_fsync_batch_answers_each_publish_only_after_the_fdatasync_that_covers_its_record(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor, fsync="batch", segment_bytes=4000)
    records = append_watched(store, loop, 300)
    assert len({id(e["segment"]) for e in records}) >= 3, "records spread over several segments"
    for e in records:
        assert e["synced"] >= e["end"], f"answered before its record (ending at {e['end']}) was fdatasynced: {e}"
        assert e["fsyncs"] > e["fsyncs_before"], "answered without an fdatasync after it was appended"
    assert 1 <= store.fsyncs < len(records), "group commit: publishes share fdatasyncs"
    store.close()


def test_fsync_interval_answers_before_the_sync_and_syncs_within_the_interval(tmp_path, executor):
    loop = Loop()
    interval = 0.3
    store = open_store(tmp_path, loop, executor, fsync="interval", fsync_interval_s=interval)
    (first,) = append_watched(store, loop, 1)
    assert store.fsyncs == 0 and first["synced"] < first["end"], "answered once written, before any fsync"
    run_ticking(store, loop, lambda: first["segment"].synced >= first["end"], timeout=interval + 0.5)
    assert store.fsyncs >= 1
    # the next one is answered at once again; the sync follows within the interval
    (second,) = append_watched(store, loop, 1)
    synced_once = store.fsyncs
    assert second["synced"] < second["end"] and second["fsyncs"] == synced_once
    run_ticking(store, loop, lambda: second["segment"].synced >= second["end"], timeout=interval + 0.5)
    store.close()


def test_fsync_never_never_syncs(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor, fsync="never", segment_bytes=2000, fsync_interval_s=0.01,
                       ack_sync_interval_s=0.01)
    records = append_watched(store, loop, 60)
    for e in records[:30]:  # acks and a dead letter: the other files a store would sync
        store.finish(e["message"], "g1")
    store.dead_letter(records[40]["message"], "g1", "delivery limit of 1 reached", 1, 5)
    run_ticking(store, loop, lambda: not store.busy and not store._finished and not store.dlq.pending, timeout=2)
    store.close()
    assert (store.fsyncs, store.other_fsyncs) == (0, 0)
    assert all(e["synced"] == 0 for e in records)
    # written all the same (the OS keeps it): a reopened store finds every record and the acks
    owed = FileStore(tmp_path, executor=executor, notify=loop.notify).recover()
    assert [groups for _, groups in owed] == [("g2",)] * 30 + [("g1", "g2")] * 10 + [("g2",)] + [("g1", "g2")] * 19


def test_recovery_returns_what_each_group_still_owes(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor)
    messages = append_all(store, loop, [batch(10)])
    for m in messages[:4]:
        store.finish(m, "g1")
        store.finish(m, "g2")
    store.finish(messages[4], "g1")
    store.close()

    again = FileStore(tmp_path, executor=executor, notify=loop.notify)
    owed = again.recover()
    assert [(m.id, groups) for m, groups in owed] == \
        [("m4", ("g2",))] + [(f"m{i}", ("g1", "g2")) for i in range(5, 10)]
    assert again.next_seq == 11


def test_a_torn_tail_is_truncated_and_earlier_records_survive(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor)
    append_all(store, loop, [batch(3), batch(3, 3)])
    store.close()
    (segment,) = sorted(tmp_path.glob("*.log"))
    intact = segment.stat().st_size
    with open(segment, "ab") as f:  # half a record, as a crash in the middle of a write leaves it
        f.write(b"\x00\x00\x10\x00\x12\x34\x56\x78\x01partial")
    again = FileStore(tmp_path, executor=executor, notify=loop.notify)
    owed = again.recover()
    assert [m.id for m, _ in owed] == [f"m{i}" for i in range(6)]
    assert segment.stat().st_size == intact
    # and new appends continue after the truncation point
    append_all(again, loop, [batch(1, 6)])
    again.close()
    assert [m.id for m, _ in FileStore(tmp_path, executor=executor, notify=loop.notify).recover()][-1] == "m6"


def test_a_corrupt_record_ends_the_segment(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor)
    append_all(store, loop, [batch(2), batch(2, 2), batch(2, 4)])
    store.close()
    (segment,) = sorted(tmp_path.glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF  # flip a byte inside the second record
    segment.write_bytes(bytes(data))
    owed = FileStore(tmp_path, executor=executor, notify=loop.notify).recover()
    assert [m.id for m, _ in owed] == ["m0", "m1"]


def test_finished_segments_are_deleted(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor, segment_bytes=600)
    messages = append_all(store, loop, [batch(5, i * 5) for i in range(6)])
    assert len(list(tmp_path.glob("*.log"))) >= 3
    for m in messages[:25]:  # everything but the last batch (in the active segment)
        store.finish(m, "g1")
        store.finish(m, "g2")
    store.tick(time.monotonic())
    loop.run(lambda: not store.busy and len(list(tmp_path.glob("*.log"))) == 1)
    assert [m.id for m, _ in FileStore(tmp_path, executor=executor, notify=loop.notify).recover()] == \
        [f"m{i}" for i in range(25, 30)]


def test_one_unfinished_message_keeps_only_its_own_segment(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor, segment_bytes=600)
    messages = append_all(store, loop, [batch(5, i * 5) for i in range(6)])
    keep = messages[7]
    for m in messages:
        if m is not keep:
            store.finish(m, "g1")
            store.finish(m, "g2")
    store.tick(time.monotonic())
    loop.run(lambda: not store.busy and len(list(tmp_path.glob("*.log"))) == 2)
    store.close()
    assert [m.id for m, _ in FileStore(tmp_path, executor=executor, notify=loop.notify).recover()] == ["m7"]


def test_dead_letters_are_kept_and_listed_after_restart(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor)
    messages = append_all(store, loop, [batch(3)])
    store.dead_letter(messages[1], "g1", "delivery limit of 3 reached", 3, 123)
    store.tick(time.monotonic())
    loop.run(lambda: not store.busy)
    store.close()
    again = FileStore(tmp_path, executor=executor, notify=loop.notify)
    owed = {m.id: groups for m, groups in again.recover()}
    assert owed["m1"] == ("g2",)  # finished for g1 by the dead letter
    assert again.dead_letter_count("g1") == 1
    (dead,) = again.dead_letters("g1", 10)
    assert dead.to_dict()["message_id"] == "m1"
    assert dead.cause == "delivery limit of 3 reached" and dead.attempts == 3


def test_messages_for_no_group_do_not_keep_a_segment(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor, segment_bytes=500)
    append_all(store, loop, [batch(3, i * 3, groups=()) for i in range(4)])
    store.tick(time.monotonic())
    loop.run(lambda: not store.busy and len(list(tmp_path.glob("*.log"))) == 1)


def test_a_failed_write_fails_the_publish(tmp_path, executor):
    loop = Loop()
    store = open_store(tmp_path, loop, executor)
    append_all(store, loop, [batch(1)])
    os.close(store.active.log_fd)  # the disk goes away under the store
    done = []
    store.append("app", 1, *batch(1, 1), done.append)
    loop.run(lambda: done)
    assert done[0] is not None
    later = []
    store.append("app", 1, *batch(1, 2), later.append)
    loop.run(lambda: later)
    assert later[0] is not None  # a failed store refuses further publishes rather than guess
    store.active.log_fd = None


def test_memory_store_same_contract():
    loop = Loop()
    store = MemoryStore(notify=loop.notify)
    done = []
    messages = store.append("app", 1, *batch(2), done.append)
    loop.run(lambda: done)
    store.dead_letter(messages[0], "g1", "ttl expired", 1, 5)
    assert store.dead_letter_count("g1") == 1
    assert store.dead_letters("g1", 10)[0].seq == messages[0].seq
    assert store.recover() == []
