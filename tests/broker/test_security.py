"""Authentication, grants and bad input: each refusal is a clear error; the broker keeps serving."""

from __future__ import annotations

import random
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import msgpack
import pytest

from broker_core import protocol as p
from broker_core.client import AuthError, BrokerError, Consumer, Producer
from tests.broker.conftest import APP, REPORTS, SECRET, wait_for
from tests.broker.helpers import Received


def test_wrong_secret_unknown_app_and_inactive_app_are_refused(cluster):
    cluster.standard("orders")
    cluster.pv.app("retired", "old-secret", active=False)
    broker = cluster.broker()
    cases = [(APP, "not-the-secret", f"wrong secret for app {APP!r}"), ("ghost", "x", "unknown app 'ghost'"),
             ("retired", "old-secret", "app 'retired' is not active")]
    for app, secret, message in cases:
        with Producer(app_id=app, secret=secret, brokers=[broker.address], send_timeout=5) as producer:
            with pytest.raises(AuthError) as err:
                producer.send("orders", b"x")
        assert err.value.code == p.E_AUTH_FAILED and err.value.message == message
    assert broker.stats()["auth_failures"] == 3
    with Producer(**cluster.client_kwargs()) as producer:  # and the right secret still works
        assert producer.send("orders", b"ok")


def test_publishing_needs_a_grant_on_the_topic(cluster):
    cluster.standard("orders")
    cluster.pv.topic("payments")  # no grant for APP
    cluster.pv.topic("typed", message_types=["order.created"])
    cluster.pv.grant("typed", APP)
    cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        with pytest.raises(BrokerError) as err:
            producer.send("payments", b"x")
        assert err.value.code == p.E_NOT_GRANTED
        assert err.value.message == f"app {APP!r} has no grant to publish on topic 'payments'"
        with pytest.raises(BrokerError) as err:
            producer.send("nowhere", b"x")
        assert err.value.code == p.E_UNKNOWN_TOPIC
        with pytest.raises(BrokerError) as err:
            producer.send("typed", b"x", message_type="order.deleted")
        assert err.value.code == p.E_INVALID and "not declared" in err.value.message
        # the same connection goes on serving what is allowed
        assert producer.send("orders", b"fine") and producer.send("typed", b"ok", message_type="order.created")


def read_until_closed(sock: socket.socket, timeout: float) -> tuple[list[p.Event], bool]:
    """Everything the broker sends until it closes the connection (or `timeout`)."""
    sock.settimeout(timeout)
    conn = p.Connection(p.CLIENT)
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return events, False
        except ConnectionResetError:
            return events, True
        if not data:
            return events, True
        conn.receive_data(data)
        events.extend(conn.events())
    return events, False


def hello_frame(app=APP, secret=SECRET) -> bytes:
    return p.encode_frame(p.Hello(1, "fuzz", app, secret, 1000, {}))


def fuzz_inputs(rng: random.Random) -> list[tuple[str, bytes, bool]]:
    """(name, bytes, authenticate first). Every one must end in an error or a closed connection."""
    cases = [
        ("http request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False),
        ("oversized frame", p.HEADER.pack(b"SY", 1, p.Publish.code, 1 << 30), True),
        ("unknown command", p.HEADER.pack(b"SY", 1, 99, 1) + b"\x90", True),
        ("reserved transaction command", p.HEADER.pack(b"SY", 1, 19, 1) + b"\x90", True),
        ("wrong version", p.HEADER.pack(b"SY", 7, p.Ping.code, 1) + b"\x90", False),
        ("garbage body", p.HEADER.pack(b"SY", 1, p.Publish.code, 4) + b"\xc1\xc1\xc1\xc1", True),
        ("wrong shape", p.HEADER.pack(b"SY", 1, p.Publish.code, 1) + b"\x90", True),
        ("server-only command", p.encode_frame(p.Welcome(1, "n", "c", 1, 1)), True),
        ("publish before hello", p.encode_frame(p.Publish(1, "orders", [p.message("i", "t", b"x")])), False),
        ("malformed message", p.encode_frame(p.Publish(1, "orders", [[1, 2, 3]])), True),
        ("ack of non-integers", p.encode_frame(p.Ack(1, ["x"])), True),
        ("truncated frame then silence", p.encode_frame(p.Ping())[:5], False),
        ("truncated body then silence", hello_frame()[:-3], False),
    ]
    for i in range(40):
        size = rng.randrange(1, 200)
        if i % 2:
            body = bytes(rng.randrange(256) for _ in range(size))
            data = struct.pack(">2sBBI", b"SY", 1, rng.choice(list(p.EVENTS)), len(body) + rng.choice((0, 0, 5))) + body
        else:
            data = bytes(rng.randrange(256) for _ in range(size))
        cases.append((f"random {i}", data, rng.random() < 0.5))
    return cases


def try_bad_connection(port: int, name: str, data: bytes, authenticate: bool) -> tuple[str, list, bool]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        if authenticate:
            sock.sendall(hello_frame())
        sock.sendall(data)
        events, closed = read_until_closed(sock, timeout=8)
    return name, events, closed


def test_fuzzed_and_truncated_frames_close_only_their_own_connection(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker("--hello-timeout-ms", "1000")
    got = Received()
    consumer = Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()).start()
    producer = Producer(**cluster.client_kwargs())
    cases = fuzz_inputs(random.Random(20))
    outcomes = {"error then closed": 0, "closed": 0}
    try:
        producer.send("orders", b"before")
        with ThreadPoolExecutor(len(cases)) as pool:  # all at once, while the good clients keep working
            results = [pool.submit(try_bad_connection, broker.port, *case) for case in cases]
            sent = [producer.send("orders", f"during {i}".encode()) for i in range(20)]
            results = [r.result() for r in results]
        for name, events, closed in results:
            errors = [e for e in events if isinstance(e, p.Error)]
            assert closed or errors, f"{name}: no error and still open"
            if errors:
                assert errors[-1].fatal and errors[-1].message, f"{name}: {errors}"
            if name in ("oversized frame", "wrong version", "publish before hello", "garbage body"):
                assert closed and errors, f"{name} must get an error frame, then a close"
            outcomes["error then closed" if errors else "closed"] += 1
        assert broker.proc.poll() is None
        sent.append(producer.send("orders", b"after"))
        wait_for(lambda: got.count("c") == 1 + len(sent), 10, "every message of the good clients")
    finally:
        producer.close()
        consumer.stop()
    assert broker.stats()["connections"] == 0
    REPORTS.append(f"fuzz: {sum(outcomes.values())} bad connections: {outcomes}; broker served throughout")


def test_an_authenticated_client_sending_garbage_is_cut_off_alone(cluster):
    cluster.standard("orders")
    broker = cluster.broker()
    with socket.create_connection(("127.0.0.1", broker.port)) as bad, \
            Producer(**cluster.client_kwargs()) as good:
        bad.sendall(hello_frame())
        body = msgpack.packb([1, "orders", "not a list"])
        bad.sendall(p.HEADER.pack(b"SY", 1, p.Publish.code, len(body)) + body)
        events, closed = read_until_closed(bad, 5)
        assert isinstance(events[0], p.Welcome)
        assert closed and isinstance(events[-1], p.Error) and events[-1].code_name == p.E_BAD_FRAME
        assert "malformed Publish" in events[-1].message
        assert good.send("orders", b"still fine")
