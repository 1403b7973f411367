"""The wire protocol without sockets: bytes in, events out (h11 style)."""

from __future__ import annotations

import random
import struct

import msgpack
import pytest

from broker_core import protocol as p


def roundtrip(event: p.Event, receiver_role: str) -> p.Event:
    conn = p.Connection(receiver_role)
    conn.receive_data(p.encode_frame(event))
    got = conn.next_event()
    assert conn.next_event() is p.NEED_DATA
    return got


@pytest.mark.parametrize("event", [
    p.Hello(1, "client-1", "app", "secret", 500, {"sdk": "py"}),
    p.Publish(7, "orders", [p.message("id-1", "order.created", b"body")]),
    p.Subscribe(8, "orders", "billing", 100, 2000),
    p.Ready(1, 50),
    p.Ack(1, [1, 2, 3]),
    p.Nack(1, [[4, -1, "boom"]]),
    p.Unsubscribe(1),
    p.Ping(),
    p.ListDeadLetters(9, "orders", "billing", 10),
    p.Goodbye("bye"),
])
def test_client_events_round_trip(event):
    assert roundtrip(event, p.SERVER) == event


@pytest.mark.parametrize("event", [
    p.Welcome(1, "node-1", "prod-a", 1000, 1 << 20),
    p.Published(7, 100, 3),
    p.Subscribed(8, 1, "broadcast", 100, 30000),
    p.Deliver(1, [[1, 1, p.message("id-1", "t", b"x")]]),
    p.Error(7, p.E_NOT_GRANTED, "no grant", False),
    p.DeadLetters(9, [{"seq": 1}]),
    p.Unsubscribed(1, "binding removed"),
    p.Pong(),
])
def test_server_events_round_trip(event):
    assert roundtrip(event, p.CLIENT) == event


def test_frames_split_at_every_byte_and_joined():
    events = [p.Ping(), p.Ack(3, list(range(100))), p.Publish(1, "t", [p.message("a", "t", b"x" * 3000)])]
    data = b"".join(p.encode_frame(e) for e in events)
    conn = p.Connection(p.SERVER)
    got = []
    for i in range(len(data)):
        conn.receive_data(data[i:i + 1])
        got.extend(conn.events())
    assert got == events
    assert conn.buffered == 0


def test_header_is_versioned():
    frame = p.encode_frame(p.Ping())
    magic, version, code, length = p.HEADER.unpack(frame[:p.HEADER_SIZE])
    assert (magic, version, code) == (b"SY", p.PROTOCOL_VERSION, p.Ping.code)
    bad = p.HEADER.pack(b"SY", 99, p.Ping.code, 1) + b"\x90"
    conn = p.Connection(p.SERVER)
    conn.receive_data(bad)
    with pytest.raises(p.ProtocolError) as err:
        conn.next_event()
    assert err.value.code == p.E_UNSUPPORTED


def test_oversized_frame_is_refused_from_its_header_alone():
    conn = p.Connection(p.SERVER, max_frame=1024)
    conn.receive_data(p.HEADER.pack(b"SY", 1, p.Publish.code, 10_000_000))
    with pytest.raises(p.ProtocolError) as err:
        conn.next_event()
    assert err.value.code == p.E_TOO_LARGE
    # the connection stays failed: later bytes are refused too
    with pytest.raises(p.ProtocolError):
        conn.receive_data(b"more")


@pytest.mark.parametrize("data,fragment", [
    (b"GET / HTTP/1.1\r\n\r\n", "magic"),
    (p.HEADER.pack(b"SY", 1, 200, 1) + b"\x90", "unknown command"),
    (p.HEADER.pack(b"SY", 1, 19, 1) + b"\x90", "reserved"),
    (p.HEADER.pack(b"SY", 1, p.Publish.code, 3) + b"\xc1\xc1\xc1", "not valid msgpack"),
    (p.HEADER.pack(b"SY", 1, p.Publish.code, 1) + b"\x90", "expected 3 fields"),
    (p.encode_frame(p.Welcome(1, "n", "c", 1, 1)), "may not be sent by the client"),
])
def test_malformed_frames_raise_protocol_error(data, fragment):
    conn = p.Connection(p.SERVER)
    conn.receive_data(data)
    with pytest.raises(p.ProtocolError, match=fragment):
        conn.next_event()


def test_wrong_field_types_are_refused():
    body = msgpack.packb([1, 123, []])  # topic must be a string
    conn = p.Connection(p.SERVER)
    conn.receive_data(p.HEADER.pack(b"SY", 1, p.Publish.code, len(body)) + body)
    with pytest.raises(p.ProtocolError, match="wrong type"):
        conn.next_event()


def test_incomplete_frame_needs_data():
    frame = p.encode_frame(p.Subscribe(1, "orders", "g", 1, 0))
    conn = p.Connection(p.SERVER)
    conn.receive_data(frame[:-1])
    assert conn.next_event() is p.NEED_DATA
    conn.receive_data(frame[-1:])
    assert isinstance(conn.next_event(), p.Subscribe)


def test_message_arrays_are_checked():
    m = p.message("id", "order.created", b"\x00body", key="k", business_id="b", headers={"h": "v"}, ttl_ms=5,
                  delivery_limit=3, timestamp_ms=9)
    assert p.check_message(m) is m
    assert m[p.M_ID] == "id" and m[p.M_BODY] == b"\x00body" and m[p.M_HEADERS] == {"h": "v"}
    assert (m[p.M_TTL_MS], m[p.M_DELIVERY_LIMIT], m[p.M_TIMESTAMP_MS]) == (5, 3, 9)
    for bad in ("not a list", [1, 2], ["id", "t", None, None, {}, "str body", 0, 0, 0, 0],
                ["id", "t", None, None, {}, b"", -1, 0, 0, 0], ["", "t", None, None, {}, b"", 0, 0, 0, 0],
                ["id", "t", 5, None, {}, b"", 0, 0, 0, 0]):
        with pytest.raises(p.ProtocolError):
            p.check_message(bad)


def test_sending_checks_the_role():
    with pytest.raises(ValueError):
        p.Connection(p.CLIENT).send(p.Welcome(1, "n", "c", 1, 1))
    assert p.Connection(p.CLIENT).send(p.Ping()) == p.encode_frame(p.Ping())


def test_random_garbage_never_escapes_as_another_exception():
    rng = random.Random(4)
    for _ in range(2000):
        conn = p.Connection(p.SERVER, max_frame=4096)
        size = rng.randrange(1, 64)
        if rng.random() < 0.5:  # a plausible header, random body
            code = rng.choice(list(p.EVENTS))
            body = bytes(rng.randrange(256) for _ in range(size))
            data = struct.pack(">2sBBI", b"SY", 1, code, len(body)) + body
        else:
            data = bytes(rng.randrange(256) for _ in range(size))
        conn.receive_data(data)
        try:
            while conn.next_event() is not p.NEED_DATA:
                pass
        except p.ProtocolError:
            pass
