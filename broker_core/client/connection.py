"""One SDK connection to one broker: the only networking in the SDK (asyncio), over the shared
protocol module.

Requests carry a `ref` and are answered by a frame with the same ref; deliveries and broker-side
unsubscriptions go to callbacks. Outgoing frames are gathered and written once per loop turn.
Both sides send heartbeats: a broker silent for `missed_heartbeats` intervals is taken as dead
and the connection is closed, failing every request still waiting.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from broker_core import protocol as p
from broker_core.client.errors import AuthError, BrokerError, ConnectionLost

log = logging.getLogger("broker_core.client")

MISSED_HEARTBEATS = 2.5
FLUSH_AT = 128 * 1024  # write at once when this much is queued, without waiting for the loop turn to end


@dataclass(frozen=True)
class BrokerAddress:
    node_id: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}"


class BrokerConnection(asyncio.Protocol):
    def __init__(
        self,
        address: BrokerAddress,
        *,
        app_id: str,
        secret: str,
        client_id: str,
        heartbeat_ms: int = 5000,
        on_deliver: Callable[[BrokerConnection, p.Deliver], None] | None = None,
        on_unsubscribed: Callable[[BrokerConnection, p.Unsubscribed], None] | None = None,
        on_check: Callable[[BrokerConnection, p.CheckTx], None] | None = None,
        features: dict | None = None,
        max_frame: int = p.DEFAULT_MAX_FRAME,
    ):
        self.address = address
        self.app_id = app_id
        self.secret = secret
        self.client_id = client_id
        self.heartbeat_ms = heartbeat_ms
        self.on_deliver = on_deliver
        self.on_unsubscribed = on_unsubscribed
        self.on_check = on_check  # back-checks (CheckTx); only with features={"check_listener": True}
        self.features = features or {}
        self.proto = p.Connection(p.CLIENT, max_frame=max_frame)
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, asyncio.Future] = {}
        self._refs = itertools.count(1)
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self.welcome: p.Welcome | None = None
        self.closed = self.loop.create_future()  # result: the reason (an exception or None)
        self.fatal: p.Error | None = None
        self.last_recv = self.last_send = time.monotonic()
        self._heartbeat_task: asyncio.Task | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._pings = self._pongs = 0  # Pongs answer Pings in order
        self._pong_waiters: deque[tuple[int, asyncio.Future]] = deque()

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    async def open(cls, address: BrokerAddress, timeout: float = 5.0, **kwargs) -> BrokerConnection:
        """Connect, authenticate and wait for Welcome, all within `timeout`."""
        loop = asyncio.get_running_loop()
        conn = cls(address, **kwargs)
        try:
            await asyncio.wait_for(loop.create_connection(lambda: conn, address.host, address.port), timeout)
            hello = p.Hello(p.PROTOCOL_VERSION, conn.client_id, conn.app_id, conn.secret, conn.heartbeat_ms,
                            conn.features)
            waiter = loop.create_future()
            conn.pending[0] = waiter  # Welcome answers ref 0
            conn.send(hello)
            conn.welcome = await asyncio.wait_for(waiter, timeout)
        except BaseException:
            conn.close()
            raise
        conn.heartbeat_ms = conn.welcome.heartbeat_ms
        conn._heartbeat_task = loop.create_task(conn._heartbeats())
        return conn

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        self.last_recv = time.monotonic()
        try:
            self.proto.receive_data(data)
            for event in self.proto.events():
                self._handle(event)
        except p.ProtocolError as exc:
            log.error("broker %s sent a bad frame: %s", self.address, exc)
            self.close(exc)

    def _handle(self, event: p.Event) -> None:
        kind = type(event)
        if kind is p.Deliver:
            if self.on_deliver is not None:
                self.on_deliver(self, event)
        elif kind is p.Published or kind is p.Subscribed or kind is p.DeadLetters or kind is p.TxEnded:
            waiter = self.pending.pop(event.ref, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(event)
        elif kind is p.Ping:
            self.send(p.Pong())
        elif kind is p.Pong:
            self._pongs += 1
            while self._pong_waiters and self._pong_waiters[0][0] <= self._pongs:
                waiter = self._pong_waiters.popleft()[1]
                if not waiter.done():
                    waiter.set_result(None)
        elif kind is p.Error:
            self._handle_error(event)
        elif kind is p.Welcome:
            waiter = self.pending.pop(0, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(event)
        elif kind is p.Unsubscribed:
            if self.on_unsubscribed is not None:
                self.on_unsubscribed(self, event)
        elif kind is p.CheckTx:
            if self.on_check is not None:
                self.on_check(self, event)
            else:  # we never said we listen; answer so the broker need not wait
                self.send(p.TxState(event.check_id, event.message_id, p.TX_UNKNOWN))
        elif kind is p.Goodbye:
            self.close(ConnectionLost(f"broker {self.address} said goodbye: {event.reason}"))

    def _handle_error(self, err: p.Error) -> None:
        cls = AuthError if err.code_name == p.E_AUTH_FAILED else BrokerError
        exc = cls(err.code_name, err.message)
        if err.ref is not None and err.ref in self.pending:
            waiter = self.pending.pop(err.ref)
            if not waiter.done():
                waiter.set_exception(exc)
        elif err.fatal:
            self.fatal = err
            self.close(exc)
        else:
            log.warning("broker %s: %s", self.address, exc)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = ConnectionLost(f"connection to {self.address} lost" + (f": {exc}" if exc else ""))
        self._finish(reason)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- writing ------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return not self.closed.done()

    def next_ref(self) -> int:
        return next(self._refs)

    def write(self, frame: bytes) -> None:
        """Queue a frame; frames go out together at the end of this loop turn, or at once when
        enough has gathered (so the broker starts on a batch while the next one is packed)."""
        if self.closed.done():
            raise ConnectionLost(f"connection to {self.address} is closed")
        self._out.append(frame)
        self._out_bytes += len(frame)
        if self._out_bytes >= FLUSH_AT:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def send(self, event: p.Event) -> None:
        self.write(p.encode_frame(event))

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._out_bytes = 0
        if not self._out or self.closed.done() or self.transport is None:
            self._out.clear()
            return
        out, self._out = self._out, []
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        self.last_send = time.monotonic()

    async def drained(self) -> None:
        """Wait while the socket's write buffer is above its high-water mark."""
        await self._writable.wait()

    def request(self, event: p.Event) -> asyncio.Future:
        """Send a request (its `ref` already set from `next_ref()`); the future gets the answer."""
        waiter = self.loop.create_future()
        self.pending[event.ref] = waiter
        try:
            self.send(event)
        except ConnectionLost as exc:
            self.pending.pop(event.ref, None)
            waiter.set_exception(exc)
        return waiter

    def ping(self) -> asyncio.Future:
        """Send a Ping; the future is done when its Pong comes back: the broker has handled everything sent
        before it, and what it sent before answering has arrived."""
        self._send_ping()
        waiter = self.loop.create_future()
        self._pong_waiters.append((self._pings, waiter))
        return waiter

    def _send_ping(self) -> None:
        self.send(p.Ping())
        self._pings += 1

    # -- heartbeats and closing -------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        interval = self.heartbeat_ms / 1000
        while not self.closed.done():
            await asyncio.sleep(interval / 2)
            now = time.monotonic()
            if now - self.last_recv > interval * MISSED_HEARTBEATS:
                self.close(ConnectionLost(f"broker {self.address} silent for {now - self.last_recv:.1f}s"))
                return
            if now - self.last_send >= interval / 2 and self.transport is not None:
                self._send_ping()

    def close(self, reason: BaseException | None = None) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()
        self._finish(reason or ConnectionLost(f"connection to {self.address} closed"))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._finish(ConnectionLost(f"connection to {self.address} aborted"))

    def _finish(self, reason: BaseException) -> None:
        if self.closed.done():
            return
        self.closed.set_result(reason)
        for waiter in self.pending.values():
            if not waiter.done():
                waiter.set_exception(reason)
        self.pending.clear()
        for _, waiter in self._pong_waiters:
            if not waiter.done():
                waiter.set_exception(reason)
        self._pong_waiters.clear()
        if self._heartbeat_task is not None and self._heartbeat_task is not asyncio.current_task():
            self._heartbeat_task.cancel()
