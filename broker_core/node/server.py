"""One client connection on the broker (nsqd's protocol_v2): frames in, one method per command.

The connection authenticates first (`Hello`, `handshake.Handshake`; another broker's replica connection:
`ReplicaServing`), then publishes, subscribes, acks. Refusals are `Error` frames naming the request; a frame that
cannot be parsed, or is too large, gets a fatal `Error` and closes this connection only. Outgoing frames are
gathered and written once per loop turn.

Memory (broker_core/README.md "Memory bound"): the broker takes at most `max_connections` connections,
`max_connections_per_host` from one address (more get a fatal `too_many_connections` error); until Hello
succeeds a frame may hold `max_prehello_frame_bytes` only, and no more is read while the secret is checked;
what waits to be written to one connection is bounded by `max_outbuf_bytes` (`room`), which groups
respect before each delivery.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time

from broker_core import protocol as p
from broker_core.delivery.lanes import Subscription
from broker_core.delivery.publish_rules import Refusal, check_publish
from broker_core.node.handshake import Handshake
from broker_core.node.host import ConnectionHost
from broker_core.replication.serving import REPLICA_HANDLERS, ReplicaServing

log = logging.getLogger("broker_core.server")

_conn_ids = itertools.count(1)
FLUSH_AT = 128 * 1024  # write at once when this much is queued
DELIVER_FRAME_BYTES = 1024 * 1024  # far below any client's frame limit, even with 4 MiB messages


class ClientConnection(Handshake, ReplicaServing, asyncio.Protocol):
    def __init__(self, broker: ConnectionHost):
        self.broker = broker
        self.options = broker.options
        self.proto = p.Connection(p.SERVER, max_frame=self.options.max_prehello_frame_bytes)
        self.proto.limit_note = " until Hello succeeds"
        self.transport: asyncio.Transport | None = None
        self.conn_no = next(_conn_ids)
        self.peer = "?"
        self.app_id: str | None = None
        self.client_id = ""
        self.consumer_id = f"c{self.conn_no}"
        self.authenticated = False
        self.authenticating = False
        self.check_listener = False  # Hello said it answers back-checks (CheckTx)
        self.closed = False
        self.subs: dict[int, Subscription] = {}
        self.refused_remapped: dict[str, int] = {}  # topic -> `remapped` of its last publish refused stale_mapping
        self._sub_ids = itertools.count(1)
        self.heartbeat_s = self.options.heartbeat_ms / 1000
        self.opened_at = self.last_recv = self.last_send = time.monotonic()
        self.paused = False
        self.paused_since = 0.0
        self.host = ""
        self.counted = False  # holds a place in the broker's connection counts
        self.reading_paused = False
        # past this much waiting to be written, read no more requests (deliveries alone stop at max_outbuf_bytes
        # plus one frame; more means answers the client does not read)
        self._full_at = self.options.max_outbuf_bytes + self.options.max_frame_bytes
        self.output_full = False
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self.loop = asyncio.get_running_loop()

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.host = str(peer[0]) if isinstance(peer, tuple) else self.peer
        if not self._take_place():
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.broker.connections.add(self)

    def _take_place(self) -> bool:
        """Count this connection in, or refuse it (fatal error, closed) when the broker or its address is full."""
        opts, broker = self.options, self.broker
        from_host = broker.connections_per_host.get(self.host, 0)
        if len(broker.connections) >= opts.max_connections:
            why = (f"this broker serves its limit of {opts.max_connections} connections (max_connections); "
                   "retry later or connect to another broker of the cluster")
        elif from_host >= opts.max_connections_per_host:
            why = (f"{self.host} already holds {from_host} connections to this broker, the limit per address "
                   "(max_connections_per_host); close some or share connections between producers")
        else:
            broker.connections_per_host[self.host] = from_host + 1
            self.counted = True
            return True
        broker.refused_connections += 1
        log.warning("refusing a connection from %s: %s", self.peer, why)
        self.closed = True
        self.transport.write(p.encode_frame(p.Error(None, p.E_TOO_MANY_CONNECTIONS, why, True)))
        self.transport.close()
        self.loop.call_later(5.0, self.transport.abort)
        return False

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_recv = time.monotonic()
        try:
            self.proto.receive_data(data)
            self._process()
            if self.authenticating:
                self._update_reading()  # read no more while the secret is checked
        except p.ProtocolError as exc:
            self.fail(exc.code, str(exc))
        except Exception as exc:  # a bug must cost one connection, not the broker
            log.exception("connection %s (%s): internal error", self.consumer_id, self.peer)
            self.fail(p.E_INTERNAL, f"internal error: {exc.__class__.__name__}")

    def _update_reading(self) -> None:
        """Read from the client unless its secret is being checked or its answers back up past the bound."""
        pause = self.authenticating or self.output_full
        if pause != self.reading_paused and not self.closed:
            self.reading_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _process(self) -> None:
        if self.reading_paused:
            self._update_reading()
        while not self.authenticating and not self.closed:
            event = self.proto.next_event()
            if event is p.NEED_DATA:
                return
            handler = self.HANDLERS.get(type(event))
            if handler is None:
                raise p.ProtocolError(f"{type(event).__name__} is not accepted here")
            if not self.authenticated and type(event) not in (p.Hello, p.Ping, p.Pong, p.Goodbye):
                self.fail(p.E_NOT_AUTHENTICATED, "send Hello with app id and secret first")
                return
            handler(self, event)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release()

    def _release(self) -> None:
        """Forget this connection: its subscriptions end and their in-flight messages go back."""
        self.broker.connections.discard(self)
        if self.counted:
            self.counted = False
            per_host = self.broker.connections_per_host
            per_host[self.host] -= 1
            if not per_host[self.host]:
                del per_host[self.host]
        if self.check_listener:
            self.broker.tx.connection_gone(self)
        if self.replica:
            self.broker.replication.gone(self)
        for sub in list(self.subs.values()):
            sub.group.unsubscribe(sub)
        self.subs.clear()

    def _close_transport(self, abort: bool) -> None:
        self.closed = True
        self._release()  # at once: a close can wait on a peer that does not read
        if abort:
            self.transport.abort()
        else:
            self.transport.close()
            self.loop.call_later(5.0, self.transport.abort)  # no-op once it has closed

    def pause_writing(self) -> None:
        self.paused = True
        self.paused_since = time.monotonic()

    def resume_writing(self) -> None:
        self.paused = False
        if self.output_full:
            self.output_full = False
            self._update_reading()
        for sub in list(self.subs.values()):
            sub.group.dispatch()

    def room(self) -> int:
        """Bytes that may still be queued to this connection now: 0 once what waits to be written (gathered
        here, or buffered by the transport) reaches max_outbuf_bytes, or while the transport is paused."""
        if self.paused or self.closed:
            return 0
        return self.options.max_outbuf_bytes - self._out_bytes - self.transport.get_write_buffer_size()

    # -- writing ------------------------------------------------------------------------------

    def write(self, frame: bytes) -> None:
        if self.closed:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        if self._out_bytes >= FLUSH_AT:
            self._flush()  # a big batch goes now, so the client can work on it meanwhile
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def send(self, event: p.Event) -> None:
        self.write(p.encode_frame(event))

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._out_bytes = 0
        if self.closed or not self._out:
            self._out.clear()
            return
        out, self._out = self._out, []
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        self.last_send = time.monotonic()
        if not self.output_full and self.transport.get_write_buffer_size() >= self._full_at:
            self.output_full = True  # the client does not read its answers: take no more requests from it
            self._update_reading()

    def error(self, ref: int | None, code: str, message: str) -> None:
        self.send(p.Error(ref, code, message, False))

    def fail(self, code: str, message: str, abort: bool = False) -> None:
        """Send a fatal error and close this connection."""
        if self.closed:
            return
        log.info("closing %s (%s, app %s): %s: %s", self.consumer_id, self.peer, self.app_id, code, message)
        self._flush()
        self.transport.write(p.encode_frame(p.Error(None, code, message, True)))
        self._close_transport(abort)

    def close(self, reason: str = "") -> None:
        if not self.closed:
            self.send(p.Goodbye(reason))
            self._flush()
            self._close_transport(abort=False)

    # -- consumer side, called by groups ------------------------------------------------------

    def deliver(self, sub_id: int, items: list) -> None:
        """Send deliveries, split so that no frame grows past DELIVER_FRAME_BYTES."""
        start, size = 0, 0
        for i, item in enumerate(items):
            size += len(item[2][p.M_BODY]) + 128
            if size > DELIVER_FRAME_BYTES and i > start:
                self.write(p.encode_frame(p.Deliver(sub_id, items[start:i])))
                start, size = i, len(item[2][p.M_BODY]) + 128
        self.write(p.encode_frame(p.Deliver(sub_id, items[start:] if start else items)))

    def unsubscribed(self, sub_id: int, reason: str) -> None:
        self.subs.pop(sub_id, None)
        self.send(p.Unsubscribed(sub_id, reason))

    # -- timers, from the broker's tick -----------------------------------------------------

    def check_liveness(self, now: float) -> None:
        if self.closed:
            return
        if not self.authenticated and not self.authenticating \
                and now - self.opened_at > self.options.hello_timeout_ms / 1000:
            self.fail(p.E_NOT_AUTHENTICATED, "no Hello within the time allowed", abort=True)
        elif now - self.last_recv > self.heartbeat_s * self.options.missed_heartbeats and not self.output_full:
            # (while its output is full the broker does not read it: the slow-consumer rule below decides)
            self.fail(p.E_HEARTBEAT, f"nothing received for {now - self.last_recv:.1f}s (heartbeats missed)",
                      abort=True)
        elif self.paused and now - self.paused_since > self.options.slow_consumer_timeout_ms / 1000:
            self.fail(p.E_SLOW_CONSUMER, "the connection has not read its deliveries in time", abort=True)
        elif self.authenticated and now - self.last_send >= self.heartbeat_s:
            self.send(p.Ping())

    # -- commands -------------------------------------------------------------------------------

    def on_publish(self, ev: p.Publish) -> None:
        if self.refused_remapped and ev.remapped is not None and self._after_refusal(ev):
            return
        plan = check_publish(self.broker.state, self.options.cluster, ev.topic, self.app_id, ev.messages,
                             self.options.max_message_bytes, self.broker.node_id, ev.partition)
        if isinstance(plan, Refusal):
            if plan.code == p.E_STALE_MAPPING and ev.remapped is not None:
                self.refused_remapped[ev.topic] = ev.remapped
            self.error(ev.ref, plan.code, plan.message)
            return
        topic = self.broker.topic(ev.topic)
        ref = ev.ref

        def reply(exc: BaseException | None, first_seq: int, count: int) -> None:
            if exc is not None:  # a replication refusal carries its code (not_enough_replicas)
                self.error(ref, getattr(exc, "code", p.E_STORE_FAILED), f"not stored: {exc}")
            else:
                self.send(p.Published(ref, first_seq, count))

        if plan.prepared:
            topic.prepare(self.app_id, self.peer, self.conn_no, ev.messages, plan.size, reply, plan.partition)
        elif plan.delayed:  # messages due later: the topic's schedule keeps them (issue 21)
            topic.publish_delayed(self.app_id, self.peer, ev.messages, plan, reply)
        else:
            topic.publish(self.app_id, self.peer, ev.messages, plan.size, reply, plan.partition)

    def _after_refusal(self, ev: p.Publish) -> bool:
        """A publish sent before its producer knew an earlier one of the topic was refused `stale_mapping` here is
        refused too (stored, it would put a key's later messages before the refused ones); True if refused."""
        refused = self.refused_remapped.get(ev.topic)
        if refused is None or ev.remapped > refused:
            return False
        self.error(ev.ref, p.E_STALE_MAPPING, f"an earlier publish of topic {ev.topic!r} on this connection was "
                                              f"refused stale_mapping: send this again after it, with remapped > "
                                              f"{refused} (the SDK does)")
        return True

    def on_end_tx(self, ev: p.EndTx) -> None:
        found = self.broker.tx.find(ev.message_id, ev.topic)
        if found is None:
            self.error(ev.ref, p.E_UNKNOWN_MESSAGE, f"no transaction message {ev.message_id!r} on topic "
                                                    f"{ev.topic!r} on this broker (never prepared here, or past "
                                                    "retention)")
            return
        topic, entry = found
        if entry.message.app_id != self.app_id:
            self.error(ev.ref, p.E_NOT_GRANTED, f"message {ev.message_id!r} was prepared by another app; only "
                                                "its producer ends it")
            return
        ref, message_id = ev.ref, ev.message_id
        if entry.state != p.TX_PREPARED:
            self.send(p.TxEnded(ref, message_id, entry.state, False))
            return

        def reply(exc: BaseException | None) -> None:
            if exc is not None:  # a replication refusal carries its code (not_enough_replicas, not_leader)
                self.error(ref, getattr(exc, "code", p.E_STORE_FAILED), f"not stored: {exc}")
            else:
                self.send(p.TxEnded(ref, message_id, entry.state, True))

        topic.end_tx(entry, ev.commit, "producer", self.peer, reply)

    def on_tx_state(self, ev: p.TxState) -> None:
        self.broker.tx.answered(self, ev)

    def on_subscribe(self, ev: p.Subscribe) -> None:
        state = self.broker.state
        if ev.topic not in state.topics:
            self.error(ev.ref, p.E_UNKNOWN_TOPIC, f"topic {ev.topic!r} does not exist in cluster "
                                                  f"{self.options.cluster!r}")
            return
        binding = state.binding(ev.topic, ev.group)
        if binding is None:
            self.error(ev.ref, p.E_NO_BINDING, f"group {ev.group!r} has no approved binding on topic {ev.topic!r}")
            return
        if binding.app_id != self.app_id:
            self.error(ev.ref, p.E_NO_BINDING, f"the binding of group {ev.group!r} on topic {ev.topic!r} belongs "
                                               f"to another app, not {self.app_id!r}")
            return
        if any(s.group.topic == ev.topic and s.group.name == ev.group for s in self.subs.values()):
            self.error(ev.ref, p.E_INVALID, f"already subscribed to {ev.topic}/{ev.group} on this connection")
            return
        opts = self.options
        ack_timeout_ms = ev.ack_timeout_ms or opts.ack_timeout_ms
        ack_timeout_ms = max(opts.min_ack_timeout_ms, min(ack_timeout_ms, opts.max_ack_timeout_ms))
        group = self.broker.topic(ev.topic).group(ev.group)
        credit = max(0, ev.credit)
        sub = Subscription(next(self._sub_ids), self, group, group.clamp_credit(credit), ack_timeout_ms / 1000,
                           wanted=credit)
        self.subs[sub.sub_id] = sub
        self.send(p.Subscribed(ev.ref, sub.sub_id, binding.mode, sub.credit, ack_timeout_ms))
        group.subscribe(sub)

    def _sub(self, sub_id: int) -> Subscription | None:
        sub = self.subs.get(sub_id)
        if sub is None:
            self.error(None, p.E_INVALID, f"no subscription {sub_id} on this connection")
        return sub

    def on_ready(self, ev: p.Ready) -> None:
        sub = self._sub(ev.sub_id)
        if sub is not None:
            sub.group.set_credit(sub, ev.credit)

    def on_ack(self, ev: p.Ack) -> None:
        sub = self.subs.get(ev.sub_id)
        if sub is None:
            return  # acks after an unsubscribe: the messages went back to the group already
        seqs = ev.seqs
        for seq in seqs:
            if type(seq) is not int:
                raise p.ProtocolError("malformed Ack: seqs must be integers")
        sub.group.ack(sub, seqs)

    def on_nack(self, ev: p.Nack) -> None:
        sub = self.subs.get(ev.sub_id)
        if sub is not None:
            sub.group.nack(sub, ev.items)

    def on_unsubscribe(self, ev: p.Unsubscribe) -> None:
        sub = self.subs.pop(ev.sub_id, None)
        if sub is not None:
            sub.group.unsubscribe(sub)
            self.send(p.Unsubscribed(ev.sub_id, "unsubscribed"))

    def on_ping(self, ev: p.Ping) -> None:
        self.send(p.Pong())

    def on_pong(self, ev: p.Pong) -> None:
        return None

    def on_goodbye(self, ev: p.Goodbye) -> None:
        self._flush()
        self._close_transport(abort=False)

    def on_list_dead_letters(self, ev: p.ListDeadLetters) -> None:
        binding = self.broker.state.binding(ev.topic, ev.group)
        if binding is None or binding.app_id != self.app_id:
            self.error(ev.ref, p.E_NO_BINDING, f"app {self.app_id!r} holds no binding of group {ev.group!r} on "
                                               f"topic {ev.topic!r}")
            return
        if self.room() <= 0:
            self.error(ev.ref, p.E_INVALID, "this connection's output is full (max_outbuf_bytes): read what the "
                                            "broker sent before asking for dead letters")
            return
        topic = self.broker.topics.get(ev.topic)
        entries, size = [], 0
        for dead in topic.store.dead_letters(ev.group, max(0, min(ev.limit, 10_000))) if topic else []:
            entry = dead.to_dict()
            size += len(entry["body"]) + 256
            if size > self.options.max_frame_bytes // 2:
                break  # keep the answer well inside one frame; GET /deadletters lists them all
            entries.append(entry)
        self.send(p.DeadLetters(ev.ref, entries))

    HANDLERS = {
        p.Hello: Handshake.on_hello,
        p.Publish: on_publish,
        p.Subscribe: on_subscribe,
        p.Ready: on_ready,
        p.Ack: on_ack,
        p.Nack: on_nack,
        p.Unsubscribe: on_unsubscribe,
        p.Ping: on_ping,
        p.Pong: on_pong,
        p.Goodbye: on_goodbye,
        p.ListDeadLetters: on_list_dead_letters,
        p.EndTx: on_end_tx,
        p.TxState: on_tx_state,
        **REPLICA_HANDLERS,
    }
