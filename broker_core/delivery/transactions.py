"""Transaction messages across a broker's topics: finding them, back-checks in-band, resolving.

A back-check asks the producing app what became of a prepared message: the broker sends `CheckTx`
on a live connection of that app whose Hello declared a check listener (the connection that
published the message when it is still there, else any of them) and waits for the `TxState` answer.
Checking never changes the message; the control plane applies an answer with `resolve` (the admin
API, `broker_core.admin.api`). Everything here runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Collection, Mapping
from typing import Protocol

from broker_core import protocol as p
from broker_core.delivery.topic import Topic
from broker_core.storage.store import TxEntry

log = logging.getLogger("broker_core.transactions")


class CheckListener(Protocol):
    """What back-checks need of a client connection (the node's `CheckListener` is one)."""

    app_id: str | None
    conn_no: int
    peer: str
    check_listener: bool
    authenticated: bool
    closed: bool

    def send(self, event: p.Event) -> None: ...


class TxService:
    """`topics` and `connections` are the node's own collections, read live (never copied)."""

    def __init__(self, topics: Mapping[str, Topic], connections: Collection[CheckListener]):
        self.topics = topics
        self.connections = connections
        self._check_ids = itertools.count(1)
        # check id -> (connection asked, message id, future of the answer)
        self.pending: dict[int, tuple[CheckListener, str, asyncio.Future]] = {}
        self.checks_sent = self.checks_answered = self.checks_timed_out = 0

    # -- lookups ------------------------------------------------------------------------------

    def find(self, message_id: str, topic: str | None = None) -> tuple[Topic, TxEntry] | None:
        """The topic and entry of a transaction message this broker holds (None: unknown here)."""
        topics = self.topics
        candidates = [topics[topic]] if topic is not None and topic in topics else \
            [] if topic is not None else topics.values()
        for t in candidates:
            entry = t.store.tx.get(message_id)
            if entry is not None:
                return t, entry
        return None

    def listeners(self) -> dict[str, list[CheckListener]]:
        """Live connections with a check listener, by app id."""
        out: dict[str, list[CheckListener]] = {}
        for conn in self.connections:
            if conn.check_listener and conn.authenticated and not conn.closed:
                out.setdefault(conn.app_id, []).append(conn)
        return out

    def prepared(self) -> list[tuple[Topic, TxEntry]]:
        return [(t, e) for t in self.topics.values() for e in t.store.prepared.values()]

    # -- back-checks ----------------------------------------------------------------------------

    async def check(self, message_ids: list[str], timeout_s: float) -> list[dict]:
        """Ask the producers about these messages, all at once; wait up to `timeout_s` for answers."""
        listeners = self.listeners()
        results: list[dict] = []
        waits: list[tuple[dict, TxEntry, asyncio.Future, int]] = []
        loop = asyncio.get_running_loop()
        for message_id in message_ids:
            result = {"message_id": message_id, "answer": None, "via": None, "connection": None, "reason": None,
                      "state": p.TX_UNKNOWN}
            results.append(result)
            found = self.find(message_id)
            if found is None:
                result["reason"] = "unknown_message"
                continue
            topic, entry = found
            result["state"] = entry.state
            if entry.state != p.TX_PREPARED:
                result["reason"] = "already_resolved"
                continue
            conns = listeners.get(entry.message.app_id)
            if not conns:
                result["reason"] = "no_listener"
                continue
            conn = next((c for c in conns if c.conn_no == entry.conn_no), None) or conns[0]
            check_id = next(self._check_ids)
            future = loop.create_future()
            self.pending[check_id] = (conn, message_id, future)
            m = entry.message
            conn.send(p.CheckTx(check_id, topic.name, m.id, m.message_type, m.key, m.business_id,
                                m.fields[p.M_HEADERS] or {}))
            self.checks_sent += 1
            result["via"], result["connection"] = "connection", conn.peer
            waits.append((result, entry, future, check_id))
        if waits:
            await asyncio.wait([w[2] for w in waits], timeout=timeout_s)
        for result, entry, future, check_id in waits:
            self.pending.pop(check_id, None)
            if future.done() and future.result() is not None:
                result["answer"] = future.result()
                self.checks_answered += 1
            else:
                future.cancel()
                result["reason"] = "timeout"
                self.checks_timed_out += 1
            result["state"] = entry.state
        return results

    def answered(self, conn: CheckListener, ev: p.TxState) -> None:
        """A `TxState` frame: settle the check it answers (an answer to no open check is ignored)."""
        waiting = self.pending.get(ev.check_id)
        if waiting is None:
            return
        asked, message_id, future = waiting
        if asked is not conn or message_id != ev.message_id:
            log.warning("connection %s answered check %s for %s, which it was not asked", conn.peer, ev.check_id,
                        ev.message_id)
            return
        del self.pending[ev.check_id]
        if not future.done():
            future.set_result(ev.state if ev.state in p.TX_ANSWERS else p.TX_UNKNOWN)

    def connection_gone(self, conn: CheckListener) -> None:
        """Checks waiting on a closed connection end now, unanswered."""
        for check_id, (asked, _, future) in list(self.pending.items()):
            if asked is conn:
                del self.pending[check_id]
                if not future.done():
                    future.set_result(None)

    # -- resolving ------------------------------------------------------------------------------

    def end(self, topic: Topic, entry: TxEntry, commit: bool, reason: str) -> asyncio.Future:
        """Commit or roll back a prepared message; the future completes (None or the store's error)
        once the record is durable."""
        future = asyncio.get_running_loop().create_future()

        def done(exc: BaseException | None) -> None:
            if not future.done():
                future.set_result(exc)

        topic.end_tx(entry, commit, reason, None, done)
        return future

    def stats(self) -> dict:
        return {"prepared": sum(len(t.store.prepared) for t in self.topics.values()),
                "checks_sent": self.checks_sent, "checks_answered": self.checks_answered,
                "checks_timed_out": self.checks_timed_out, "checks_waiting": len(self.pending),
                "listeners": sum(len(v) for v in self.listeners().values())}
