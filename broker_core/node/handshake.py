"""A client connection's first step: `Hello`, its app's secret checked (broker_core.auth), then `Welcome`.

A mixin of `server.ClientConnection` (what it uses of the connection: `broker`, `options`, `proto`, `loop`,
`send`, `fail`, `_process`; another broker's replica connection goes to `ReplicaServing.replica_hello`). Fast
(HMAC) hashes are checked on the loop; legacy PBKDF2 ones in the broker's auth executor, their result cached,
while the connection reads no more frames (`authenticating`).
"""

from __future__ import annotations

import asyncio
import time

from broker_core import protocol as p
from broker_core.auth import is_fast, verify_any, verify_secret


def _verify_legacy(secret: str, hashes: list[str]) -> str | None:
    """In the auth thread: the legacy (PBKDF2) hash the secret matches, else None."""
    return next((encoded for encoded in hashes if verify_secret(secret, encoded)), None)


class Handshake:
    """Hello and its secret check, for `server.ClientConnection`."""

    def on_hello(self, ev: p.Hello) -> None:
        if self.authenticated:
            raise p.ProtocolError("Hello sent twice")
        if ev.app_id == p.REPLICA_APP:  # another broker of the cluster (broker_core.replication.serving)
            return self.replica_hello(ev)
        state = self.broker.state
        app = state.apps.get(ev.app_id)
        if app is None or not app.active:
            self.broker.auth_failures += 1
            self.fail(p.E_AUTH_FAILED, f"unknown app {ev.app_id!r}" if app is None else
                      f"app {ev.app_id!r} is not active")
            return
        now = time.time()
        valid = [h for h in app.secrets if h.valid_at(now)]
        # fast (HMAC) hashes: microseconds, checked right here; legacy PBKDF2 ones off the loop, cached
        if verify_any(ev.secret, [h for h in valid if is_fast(h.hash)], now):
            self._welcome(ev)
            return
        legacy = [h.hash for h in valid if not is_fast(h.hash)]
        cache = self.broker.verified
        if any(cache.hit(app.app_id, encoded, ev.secret) for encoded in legacy):
            self._welcome(ev)
            return
        if not legacy:
            self.broker.auth_failures += 1
            self.fail(p.E_AUTH_FAILED, f"wrong secret for app {ev.app_id!r}")
            return
        self.authenticating = True
        future = self.loop.run_in_executor(self.broker.auth_executor, _verify_legacy, ev.secret, legacy)
        future.add_done_callback(lambda f: self._verified(ev, f))

    def _verified(self, ev: p.Hello, future: asyncio.Future) -> None:
        self.authenticating = False
        if self.closed:
            return
        if future.exception() is not None or future.result() is None:
            self.broker.auth_failures += 1
            self.fail(p.E_AUTH_FAILED, f"wrong secret for app {ev.app_id!r}")
            return
        self.broker.verified.remember(ev.app_id, future.result(), ev.secret)
        self._welcome(ev)
        try:
            self._process()  # frames that arrived while the secret was being checked
        except p.ProtocolError as exc:
            self.fail(exc.code, str(exc))

    def _welcome(self, ev: p.Hello) -> None:
        self.authenticated = True
        self.app_id = ev.app_id
        self.client_id = ev.client_id[:128]
        self.consumer_id = f"{self.client_id}#{self.conn_no}" if self.client_id else f"c{self.conn_no}"
        self.check_listener = ev.features.get(p.FEATURE_CHECK_LISTENER) is True
        opts = self.options
        heartbeat_ms = max(opts.min_heartbeat_ms, min(ev.heartbeat_ms or opts.heartbeat_ms, opts.heartbeat_ms))
        self.heartbeat_s = heartbeat_ms / 1000
        self.proto.max_frame, self.proto.limit_note = opts.max_frame_bytes, ""  # past Hello: frames of any size
        self.send(p.Welcome(p.PROTOCOL_VERSION, self.broker.node_id, opts.cluster, heartbeat_ms,
                            opts.max_frame_bytes))
