"""The broker's memory bound under attack (broker_core/README.md "Memory bound"), read from /proc/<pid>/status.

The bound is computed here from the documented formula and the settings each test starts the broker with,
on top of the broker's own idle RSS measured first (R0 of the formula).
"""

from __future__ import annotations

import socket
import threading
import time

from broker_core import protocol as p
from broker_core.client import Consumer, Message, Producer
from tests.broker.conftest import APP, REPORTS, SECRET, wait_for
from tests.broker.helpers import Received

KiB, MiB = 1024, 1024 * 1024
# the formula's constants (broker_core/README.md "Memory bound")
READ = 256 * KiB  # one read of the event loop
CONN = 64 * KiB  # K: a connection's objects, transport and asyncio state
PER_MESSAGE = 1 * KiB  # M: a held message's objects besides its body
PER_LANE_MESSAGE = 256  # L: a message waiting in, or in flight on, one broadcast consumer's lane
WORK = 16 * MiB  # W: the objects of the one read being processed (at worst a read of tiny frames)


def per_connection(max_frame: int, max_outbuf: int) -> int:
    """An authenticated connection: its receive buffer, and its output (the bound plus one frame past it)."""
    return max_frame + 8 + READ + max_outbuf + max_frame + CONN


def per_prehello_connection(max_prehello_frame: int) -> int:
    """A connection before Hello succeeds: a small frame's receive buffer (its output is one error frame)."""
    return max_prehello_frame + 8 + READ + CONN


class RssSampler:
    """The broker's highest RSS, sampled every 20 ms on a thread until stopped."""

    def __init__(self, broker):
        self.broker = broker
        self.peak = broker.rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, self.broker.rss_bytes())
            except (OSError, AssertionError):
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.broker.rss_bytes())
        return self.peak


def idle_rss(broker) -> int:
    """R0: the broker's RSS once it has served one client (modules, ZooKeeper client, executors warm)."""
    with Producer(**broker.cluster.client_kwargs()) as producer:
        producer.connect("orders")
    wait_for(lambda: broker.stats()["connections"] == 0, 10, "the warm-up producer to leave")
    return broker.rss_bytes()


def frame_header(code: int, length: int) -> bytes:
    return p.HEADER.pack(p.MAGIC, p.PROTOCOL_VERSION, code, length)


def test_250_unauthenticated_connections_sending_partial_large_frames_stay_within_the_bound(cluster):
    cluster.standard("orders")
    broker = cluster.broker("--no-trace")
    r0 = idle_rss(broker)
    sampler = RssSampler(broker)
    big, small, refused = [], [], 0
    try:
        for i in range(250):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            if i % 2 == 0:  # part (1 MiB) of a 16 MiB frame, as the attack sent it
                sock.setblocking(False)
                big.append(sock)
                data = frame_header(p.Hello.code, 16 * MiB - 1) + b"\x00" * MiB
                try:
                    while data:
                        sent = sock.send(data)
                        data = data[sent:]
                except (BlockingIOError, ConnectionError):
                    pass  # the broker stopped reading: it refused the frame from its header
            else:  # part of a frame within the limit before Hello, then silence (held until the Hello timeout)
                sock.sendall(frame_header(p.Hello.code, 4000) + b"\x00" * 3000)
                small.append(sock)
        # every large frame was refused from its header alone, with a reason; the small ones still wait
        for sock in big:
            sock.setblocking(True)
            sock.settimeout(10)
            conn, events = p.Connection(p.CLIENT), []
            try:
                while not events:
                    data = sock.recv(65536)
                    if not data:
                        break
                    conn.receive_data(data)
                    events.extend(conn.events())
            except ConnectionError:
                pass
            if events:
                assert isinstance(events[0], p.Error) and events[0].code_name == p.E_TOO_LARGE
                assert "until Hello succeeds" in events[0].message
                refused += 1
        wait_for(lambda: broker.stats()["connections"] == len(small), 20, "the broker to hold only the small frames")
        peak = sampler.stop()
    finally:
        for sock in big + small:
            sock.close()
    assert refused >= len(big) // 2  # (a reset may beat the error frame to a client that was still sending)
    opts = {"max_prehello_frame_bytes": 4096}
    bound = r0 + 250 * per_prehello_connection(opts["max_prehello_frame_bytes"])
    REPORTS.append(f"memory, 250 unauthenticated connections (125 with 1 MiB of a 16 MiB frame, 125 with a partial "
                   f"4000-byte frame): RSS {r0 / MiB:.0f} MiB idle -> peak {peak / MiB:.0f} MiB; "
                   f"documented bound {bound / MiB:.0f} MiB")
    assert peak <= bound, f"peak RSS {peak / MiB:.0f} MiB over the documented bound of {bound / MiB:.0f} MiB"
    assert broker.proc.poll() is None
    with Producer(**cluster.client_kwargs()) as producer:  # and it still serves
        assert producer.send("orders", b"after")


def raw_subscriber(broker, topic: str, group: str, credit: int) -> socket.socket:
    """A consumer that subscribes and then never reads again (its socket fills; the broker's output backs up)."""
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)
    sock.sendall(p.encode_frame(p.Hello(1, "stuck", APP, SECRET, 60_000, {}))
                 + p.encode_frame(p.Subscribe(1, topic, group, credit, 600_000)))
    conn, events = p.Connection(p.CLIENT), []
    while not any(isinstance(e, (p.Subscribed, p.Error)) for e in events):
        conn.receive_data(sock.recv(4096))
        events.extend(conn.events())
    assert isinstance(events[1], p.Subscribed), events
    return sock


def test_10_broadcast_subscribers_that_never_read_stay_within_the_bound_and_lose_nothing(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "feed", APP, mode="broadcast")
    max_frame, max_outbuf = 2 * MiB, 4 * MiB
    broker = cluster.broker("--no-trace", "--fsync", "never", "--heartbeat-ms", "60000", "--max-frame-bytes",
                            str(max_frame), "--max-message-bytes", str(MiB), "--max-outbuf-bytes", str(max_outbuf),
                            "--slow-consumer-timeout-ms", "3000")
    r0 = idle_rss(broker)
    body_size, batch = 64 * KiB, 15
    published: list[str] = []

    def publish(producer, mib: int, tag: str):
        for b in range(mib * MiB // (body_size * batch)):
            published.extend(producer.send_many("orders", [Message(bytes([b % 251]) * body_size, id=f"{tag}-{b}-{i}")
                                                           for i in range(batch)]))

    sampler = RssSampler(broker)
    socks = []
    try:
        with Producer(**cluster.client_kwargs(send_timeout=30)) as producer:
            publish(producer, 60, "before")  # a backlog for the first subscriber alone
            socks = [raw_subscriber(broker, "orders", "feed", credit=10_000) for _ in range(10)]
            publish(producer, 60, "after")  # and one every subscriber is owed
        backlog = len(published) * body_size
        wait_for(lambda: broker.group_stats("orders", "feed").get("consumers") == 10, 10, "10 subscribers")
        # none reads: each is cut off once its output stayed full for slow_consumer_timeout_ms
        wait_for(lambda: broker.group_stats("orders", "feed").get("consumers") == 0, 60,
                 "the stuck subscribers to be cut off")
        peak = sampler.stop()
        figures = broker.group_stats("orders", "feed")
    finally:
        for sock in socks:
            sock.close()
    # their messages went back to the group once each: a reading consumer now gets every one, once
    assert figures["depth"] == len(published) and figures["in_flight"] == 0, figures
    messages = len(published)
    bound = (r0 + 11 * per_connection(max_frame, max_outbuf)
             + backlog + messages * PER_MESSAGE + 10 * messages * PER_LANE_MESSAGE)
    REPORTS.append(f"memory, 10 broadcast subscribers that never read, {backlog / MiB:.0f} MiB backlog "
                   f"({messages} messages of 64 KiB): RSS {r0 / MiB:.0f} MiB idle -> peak {peak / MiB:.0f} MiB; "
                   f"documented bound {bound / MiB:.0f} MiB")
    assert peak <= bound, f"peak RSS {peak / MiB:.0f} MiB over the documented bound of {bound / MiB:.0f} MiB"
    got = Received()
    consumer = Consumer("orders", "feed", got.handler("c"), **cluster.client_kwargs()).start()
    try:
        wait_for(lambda: got.count("c") >= messages, 60, "every message to reach a reading consumer")
        wait_for(lambda: broker.group_stats("orders", "feed")["depth"] == 0, 20, "the group to empty")
    finally:
        consumer.stop()
    ids = got.ids("c")
    assert sorted(ids) == sorted(published)  # every message once: not lost, not multiplied
    attempts = [a for _, a, _ in got.by_consumer["c"]]
    assert max(attempts) >= 2  # what the cut-off subscribers had been sent counts as a delivery


def test_connections_are_capped_in_total_and_per_address_with_a_clear_refusal(cluster):
    cluster.standard("orders")
    broker = cluster.broker("--max-connections", "30", "--max-connections-per-host", "20")

    def connect(source: str) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10, source_address=(source, 0))
        sock.sendall(frame_header(p.Hello.code, 100))  # a Hello that never completes: the place stays taken
        return sock

    def refusal(sock: socket.socket) -> p.Error:
        conn, events = p.Connection(p.CLIENT), []
        while not events:
            data = sock.recv(4096)
            assert data, "closed without a reason"
            conn.receive_data(data)
            events.extend(conn.events())
        assert isinstance(events[0], p.Error) and events[0].fatal
        return events[0]

    held = [connect("127.0.0.1") for _ in range(20)]
    try:
        wait_for(lambda: broker.stats()["connections"] == 20, 10, "20 connections")
        with connect("127.0.0.1") as extra:
            err = refusal(extra)
        assert err.code_name == p.E_TOO_MANY_CONNECTIONS and "max_connections_per_host" in err.message
        held += [connect("127.0.0.2") for _ in range(10)]  # another address may still connect, up to the total
        wait_for(lambda: broker.stats()["connections"] == 30, 10, "30 connections")
        with connect("127.0.0.3") as extra:
            err = refusal(extra)
        assert err.code_name == p.E_TOO_MANY_CONNECTIONS and "limit of 30 connections" in err.message
        assert broker.stats()["refused_connections"] == 2
    finally:
        for sock in held[:15]:
            sock.close()
    wait_for(lambda: broker.stats()["connections"] == 15, 10, "the closed connections to free their places")
    with Producer(**cluster.client_kwargs()) as producer:
        assert producer.send("orders", b"room again")
    for sock in held[15:]:
        sock.close()


def test_a_client_that_never_reads_its_answers_is_no_longer_read_and_is_cut_off(cluster):
    cluster.standard("orders")
    max_frame, max_outbuf = MiB, MiB
    broker = cluster.broker("--no-trace", "--heartbeat-ms", "60000", "--max-frame-bytes", str(max_frame),
                            "--max-message-bytes", str(MiB // 2), "--max-outbuf-bytes", str(max_outbuf),
                            "--slow-consumer-timeout-ms", "5000")
    r0 = idle_rss(broker)
    sampler = RssSampler(broker)
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)
    sock.sendall(p.encode_frame(p.Hello(1, "deaf", APP, SECRET, 60_000, {})))
    conn = p.Connection(p.CLIENT)
    while not any(isinstance(e, p.Welcome) for e in conn.events()):
        conn.receive_data(sock.recv(4096))
    # 64 MiB of Pings, each answered by a Pong the client never reads
    pings = p.encode_frame(p.Ping()) * (64 * MiB // 9)
    sock.setblocking(False)
    sent, stalled_since = 0, None
    try:
        while sent < len(pings):
            try:
                sent += sock.send(pings[sent:sent + 256 * KiB])
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 2:  # the broker has stopped reading this client
                    break
                time.sleep(0.01)
            except ConnectionError:  # ... and has already cut it off
                break
        assert sent < len(pings), "the broker read every request although the client read none of its answers"
        wait_for(lambda: broker.stats()["connections"] == 0, 30, "the client to be cut off as a slow consumer")
        peak = sampler.stop()
    finally:
        sock.close()
    assert "slow_consumer" in broker.log()
    bound = r0 + per_connection(max_frame, max_outbuf) + WORK
    REPORTS.append(f"memory, a client sending 64 MiB of Pings and reading no Pong: it could send {sent / MiB:.1f} MiB "
                   f"(kernel buffers included) before the broker stopped reading it; RSS {r0 / MiB:.0f} MiB idle -> peak {peak / MiB:.0f} MiB; "
                   f"documented bound {bound / MiB:.0f} MiB")
    assert peak <= bound, f"peak RSS {peak / MiB:.0f} MiB over the documented bound of {bound / MiB:.0f} MiB"
