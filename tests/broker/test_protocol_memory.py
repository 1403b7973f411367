"""The parser's memory without sockets: its receive buffer holds at most one frame of the limit plus one read."""

from __future__ import annotations

import itertools
import random

import pytest

from broker_core import protocol as p

CHUNK = 64 * 1024
MiB = 1024 * 1024


def publish_frame(ref: int, body_sizes: list[int]) -> bytes:
    messages = [p.message(f"m-{ref}-{i}", "order.created", bytes([i % 256]) * size) for i, size in enumerate(body_sizes)]
    return p.encode_frame(p.Publish(ref, "orders", messages))


def chunks_of(frames, size: int):
    """The frames as one byte stream cut into reads of `size` bytes (cuts fall anywhere in a frame)."""
    pending = bytearray()
    for frame in frames:
        pending += frame
        while len(pending) >= size:
            yield bytes(pending[:size])
            del pending[:size]
    if pending:
        yield bytes(pending)


def test_256_mib_of_publish_frames_in_64_kib_reads_leave_one_frame_plus_one_read():
    rng = random.Random(16)
    conn = p.Connection(p.SERVER)  # the broker's limit: 16 MiB
    bound = conn.max_frame + p.HEADER_SIZE + CHUNK
    # frames of every size: small batches, 1 MiB batches, and some just under the 16 MiB limit
    shapes = [[100] * 10, [1000] * 50, [4 * 1024] * 100, [64 * 1024] * 16, [1000] * 1024,
              [4 * MiB - 64, 4 * MiB - 64, 4 * MiB - 64, 4 * MiB - 1024]]
    frames = [publish_frame(i, shape) for i, shape in enumerate(shapes)]
    assert max(len(f) for f in frames) > conn.max_frame - 4096  # one is almost as large as allowed
    order = [rng.randrange(len(frames)) for _ in range(4000)]
    total = 0
    stream = []
    for index in order:
        stream.append(frames[index])
        total += len(frames[index])
        if total >= 256 * MiB:
            break
    assert total >= 256 * MiB
    seen, peak = 0, 0
    for chunk in chunks_of(stream, CHUNK):
        conn.receive_data(chunk)
        peak = max(peak, conn.allocated)
        for event in conn.events():
            assert isinstance(event, p.Publish) and event.messages[0][p.M_ID] == f"m-{order[seen]}-0"
            seen += 1
    assert seen == len(stream) and conn.buffered == 0
    assert peak <= bound, f"the receive buffer grew to {peak:,} bytes (bound {bound:,})"
    assert conn.allocated <= bound


def test_a_big_frame_gives_its_memory_back_once_consumed():
    conn = p.Connection(p.SERVER)
    big = publish_frame(1, [8 * MiB])
    for chunk in chunks_of([big, publish_frame(2, [10])], CHUNK):
        conn.receive_data(chunk)
        list(conn.events())
    assert conn.allocated >= 8 * MiB  # still holding what the big frame needed
    conn.receive_data(publish_frame(3, [10]))  # the next read starts on a small buffer again
    assert [e.ref for e in conn.events()] == [3]
    assert conn.allocated <= p.KEEP_BUFFER


def test_a_frame_over_a_lowered_limit_is_refused_from_its_header_with_the_reason():
    conn = p.Connection(p.SERVER)
    conn.max_frame, conn.limit_note = 4096, " until Hello succeeds"
    conn.receive_data(p.HEADER.pack(b"SY", 1, p.Publish.code, 16 * MiB - 1))
    with pytest.raises(p.ProtocolError, match="exceeds the limit of 4096 until Hello succeeds") as err:
        conn.next_event()
    assert err.value.code == p.E_TOO_LARGE
    assert conn.allocated < 4096  # nothing of the announced body was waited for


@pytest.mark.parametrize("read_size", [1, 7, 4096, 100_003])
def test_any_cut_of_the_stream_gives_the_same_events(read_size):
    frames = [publish_frame(i, [i * 37 % 5000 + 1] * (i % 5 + 1)) for i in range(60)] + [p.encode_frame(p.Ping())]
    conn = p.Connection(p.SERVER)
    got = list(itertools.chain.from_iterable(
        (conn.receive_data(c), list(conn.events()))[1] for c in chunks_of(frames, read_size)))
    assert [type(e) for e in got] == [p.Publish] * 60 + [p.Ping]
    assert [e.ref for e in got[:60]] == list(range(60))
    assert all(len(e.messages) == i % 5 + 1 for i, e in enumerate(got[:60]))
