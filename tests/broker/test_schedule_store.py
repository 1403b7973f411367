"""The file level's schedule store on its own (real files): what recovery rebuilds after a crash — a torn log tail,
index files that lag behind the log, entries already delivered — and that sealed segments go once delivered."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from broker_core import protocol as p
from broker_core.storage.schedule import BUCKET_MS, INDEX_SIZE, bucket_of
from broker_core.storage.schedule_file import FileSchedule
from broker_core.storage.schedule_index import HOUR_MS, MINUTES, hour_of
from tests.broker.conftest import wait_for

BASE_MS = 1_900_000_000_000 - 1_900_000_000_000 % BUCKET_MS  # a bucket start, far ahead


def _open(path, executor, **kwargs) -> FileSchedule:
    lock = threading.Lock()

    def notify(fn, *args):  # the loop thread's role, played under a lock by whichever thread finishes
        with lock:
            fn(*args)

    return FileSchedule(path, executor=executor, notify=notify, segment_bytes=1500, index_sync_interval_s=0, **kwargs)


def _schedule(store: FileSchedule, count: int) -> dict[str, int]:
    """`count` messages in batches of 5, due over three buckets; returns id -> due ms once all are durable."""
    due_of, done = {}, []
    for first in range(0, count, 5):
        arrays = [p.message(f"m-{i:03d}", "t", f"body {i}".encode()) for i in range(first, first + 5)]
        due = [BASE_MS + (i % 3) * BUCKET_MS + i for i in range(first, first + 5)]
        due_of.update({a[p.M_ID]: d for a, d in zip(arrays, due, strict=True)})
        store.add("app", 1, arrays, due, done.append)
    wait_for(lambda: len(done) == count // 5 and not store.busy, 10, "the batches to be durable")
    assert done == [None] * (count // 5)
    return due_of


def _all_entries(store: FileSchedule) -> list:
    loaded, fetched = [], []
    for bucket in sorted(store.buckets):
        store.load(bucket, loaded.extend)
    wait_for(lambda: sum(len(x) for x in [loaded]) == store.count, 10, "the buckets to load")
    store.fetch(list(loaded), lambda entries, exc: fetched.append((entries, exc)))
    wait_for(lambda: fetched, 10, "the bodies")
    entries, exc = fetched[0]
    assert exc is None
    return entries


def test_recovery_rebuilds_lagging_indexes_skips_delivered_and_truncates_a_torn_tail(tmp_path):
    directory = tmp_path / "schedule"
    with ThreadPoolExecutor(2) as executor:
        store = _open(directory, executor)
        due_of = _schedule(store, 60)
        assert store.count == 60 and len(store.buckets) == 3
        assert len(list(directory.glob("*.slog"))) >= 2  # small segments: the log rolled
        delivered = [e for e in _all_entries(store) if int(e.fields[p.M_ID][2:]) < 12]
        store.delivered(delivered)
        wait_for(lambda: not store.busy, 10, "the done entries written")
        store.tick(time.monotonic())
        wait_for(lambda: not store.busy and not store._dirty_index, 10, "the index sync")
        # the crash: a torn record at the log's end, and one bucket's index lost entirely with the checkpoint
        # (as if its entries were written after the last index sync)
        newest = max(directory.glob("*.slog"))
        with open(newest, "ab") as f:
            f.write(b"\x00\x00\x01\x00torn")
        lost = directory / f"{bucket_of(BASE_MS + BUCKET_MS)}.idx"
        lost.unlink()
        (directory / "indexed").unlink()
        store._close_files()

        again = _open(directory, executor)
        again.recover()
        assert again.count == 48 and sum(again.buckets.values()) == 48
        entries = _all_entries(again)
        got = {e.fields[p.M_ID]: e.due_ms for e in entries}
        assert got == {i: d for i, d in due_of.items() if int(i[2:]) >= 12}
        assert all(e.fields[p.M_BODY] == f"body {int(e.fields[p.M_ID][2:])}".encode() and e.app_id == "app"
                   for e in entries)
        assert not newest.read_bytes().endswith(b"torn")
        # everything delivered: the sealed segments and the past buckets' files go
        again.delivered(entries)
        wait_for(lambda: not again.busy, 10, "the done entries")
        assert again.count == 0
        again.tick(time.monotonic())
        wait_for(lambda: not again.busy and not list(directory.glob("*.slog")), 10, "the segments to go")


def test_far_entries_are_indexed_by_hour_and_split_into_minutes_before_their_hour(tmp_path):
    """Entries due days ahead go to one index file per hour (600 entries in 48 hours), not per minute; loading a
    minute of an hour (or the hour coming near) splits its file into minute files; a restart counts them once,
    also after a crash that tore an hour file's last entry and lost the checkpoint (the log indexed again)."""
    directory = tmp_path / "schedule"
    rng = random.Random(3)
    now_ms = int(time.time() * 1000)
    with ThreadPoolExecutor(2) as executor:
        store = _open(directory, executor)
        due_of, done = {}, []
        for first in range(0, 600, 100):
            arrays = [p.message(f"m-{i:04d}", "t", b"far") for i in range(first, first + 100)]
            due = [now_ms + rng.randrange(HOUR_MS * 24, HOUR_MS * 24 * 3) for _ in arrays]
            due_of.update({a[p.M_ID]: d for a, d in zip(arrays, due, strict=True)})
            store.add("app", 1, arrays, due, done.append)
        wait_for(lambda: len(done) == 6 and not store.busy, 10, "the batches to be durable")
        hours = {hour_of(d) for d in due_of.values()}
        assert not list(directory.glob("*.idx")), "nothing near: no minute index file"
        assert {int(f.stem) for f in directory.glob("*.hidx")} == hours and len(hours) <= 2 * 24 + 1
        assert len(store.buckets) > len(hours), "counted by minute, indexed by hour"
        buckets_before = dict(store.buckets)

        first_bucket = min(store.buckets)  # loading one minute splits its hour
        loaded: list = []
        store.load(first_bucket, loaded.extend)
        wait_for(lambda: loaded, 10, "the bucket to load")
        assert sorted(e.due_ms for e in loaded) == sorted(d for d in due_of.values() if bucket_of(d) == first_bucket)
        hour = first_bucket // MINUTES
        assert not (directory / f"{hour}.hidx").exists()
        assert {int(f.stem) // MINUTES for f in directory.glob("*.idx")} == {hour}
        store.tick(time.monotonic())
        wait_for(lambda: not store.busy and not store._dirty_index, 10, "the index sync")
        store._close_files()

        second = sorted(hours)[1]
        kept = (directory / f"{second}.hidx").read_bytes()
        again = _open(directory, executor, index_split_ahead_ms=HOUR_MS * 24 * 4)  # every hour is near now
        again.recover()
        assert again.buckets == buckets_before and again.count == 600
        again.tick(time.monotonic())
        wait_for(lambda: not again.busy and not list(directory.glob("*.hidx")), 30, "every hour split")
        # a crash before an hour's split wrote its minute files, with half its entries synced and a torn one, and
        # the checkpoint lost: everything is indexed again (after the tear; the first half twice)
        for path in directory.glob("*.idx"):
            if int(path.stem) // MINUTES == second:
                path.unlink()
        half = len(kept) // INDEX_SIZE // 2 * INDEX_SIZE
        (directory / f"{second}.hidx").write_bytes(kept[:half] + b"\x00torn")
        (directory / "indexed").unlink()
        again._close_files()

        last = _open(directory, executor)
        last.recover()
        assert last.buckets == buckets_before and last.count == 600, "entries indexed twice count once"
        entries = _all_entries(last)
        assert len(entries) == 600 and {e.fields[p.M_ID]: e.due_ms for e in entries} == due_of


def _read_all(store: FileSchedule, point, chunk: int) -> list:
    """Every entry `read_pending` hands out up to `point`, a chunk at a time (as a leader's snapshot reads)."""
    out, cursor, reads = [], None, 0
    got: list = []
    while True:
        store.read_pending(cursor, point, chunk, lambda *answer: got.append(answer))
        wait_for(lambda n=reads: len(got) > n, 10, "a read")
        entries, nxt, exc = got[reads]
        assert exc is None
        out.extend(entries)
        reads += 1
        if nxt is None:
            return out
        assert nxt != cursor or entries, "a read below the point that moves nothing (all is written here)"
        cursor = nxt
        assert reads < 1000


def test_a_snapshot_reads_the_log_in_order_up_to_its_point_across_segments_some_deleted(tmp_path):
    """What a replicated topic's leader sends a follower that rejoins (replication/schedule_sync.py): the schedule
    log read from its start in chunks smaller than a segment, in the order the entries were added, skipping the
    segments deleted once delivered, and nothing added after the point."""
    with ThreadPoolExecutor(2) as executor:
        store = _open(tmp_path / "schedule", executor)
        due_of = _schedule(store, 90)
        first = [e for e in _all_entries(store) if e.ref[0] == 1]
        store.delivered(first)  # every entry of the first segment: it goes
        wait_for(lambda: not store.busy, 10, "the done entries written")
        store.tick(time.monotonic())
        wait_for(lambda: not store.busy, 10, "the delivered segments deleted")
        assert not (tmp_path / "schedule" / "0000000001.slog").exists()
        point = store.snapshot_point()
        _schedule(store, 10)  # after the point: sent to a follower as they come, not in its snapshot
        read = _read_all(store, point, chunk=400)
    ids = [fields[p.M_ID] for _, _, _, fields in read]
    assert ids == sorted(ids) and len(ids) == len(set(ids)), "in the order added, each once"
    left = set(due_of) - {e.fields[p.M_ID] for e in first}
    assert first and set(ids) == left, "every entry of the segments left, none after the point"
    assert all(due == due_of[fields[p.M_ID]] and app == "app" for due, app, _, fields in read)
