"""The producer's transaction messages (docs/transactions.md): prepare, end, and both in one
(`send_transactional`). A prepared message goes to its partition's leader (a placed topic: chosen by its key,
else in turn) and is ended there; once its partition is led elsewhere (a failover: replicated, the new leader
holds it), its end goes to the new leader. Mixed into `producer.AsyncProducer`, which holds the topics' links
(`_topic_links`, `_links`), the check sessions (`_checks`), other connections (`_extra`), `connect`, `new_id`,
`send_timeout`, `options` and `conn_args`."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable

from broker_core import protocol as p
from broker_core.client.connection import BrokerAddress, BrokerConnection
from broker_core.client.errors import BrokerError, ConnectionLost, SendTimeout, SwitchyardError
from broker_core.client.transactions import PreparedMessage, TxResult

log = logging.getLogger("broker_core.client.producer")


class TransactionSending:
    async def prepare(self, topic: str, body: bytes, *, message_type: str = "default", key: str | None = None,
                      business_id: str | None = None, headers: dict[str, str] | None = None,
                      message_id: str | None = None) -> PreparedMessage:
        """Store a prepared message (never delivered until committed); returns once it is durable.

        The topic must be transactional. On a lost connection it is sent again with the same id (the
        same broker keeps one copy; another broker would hold a second one, which a back-check settles).
        """
        if type(body) is not bytes:
            raise TypeError("a message body must be bytes")
        message_id = message_id or self.new_id()
        array = [message_id, message_type, key, business_id, headers or {}, body, 0, 0, p.FLAG_PREPARED,
                 int(time.time() * 1000)]
        deadline = time.monotonic() + self.send_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SendTimeout(f"prepared message {message_id} not acknowledged within {self.send_timeout}s")
            await self.connect(topic, timeout=remaining)
            partition, conn = self._topic_links[topic].tx_target(topic, key)  # its partition's leader
            if conn is None:
                await asyncio.sleep(0.02)  # (a connection to it is being opened)
                continue
            try:
                await asyncio.wait_for(conn.request(p.Publish(conn.next_ref(), topic, [array], partition)),
                                       remaining)
            except ConnectionLost:
                await asyncio.sleep(0.05)
                continue
            except TimeoutError:
                continue
            except BrokerError as exc:
                if exc.code in (p.E_NOT_LEADER, p.E_NOT_ENOUGH_REPLICAS):  # moved, or its replicas are catching up
                    await asyncio.sleep(0.05)
                    continue
                raise
            return PreparedMessage(message_id, topic, conn.address, partition)

    async def end_transaction(self, prepared: PreparedMessage, commit: bool) -> str:
        """Commit or roll back a prepared message on the broker that stored it; returns its state
        ("committed" / "rolled_back": a back-check may have settled it first)."""
        deadline = time.monotonic() + self.send_timeout
        delay = 0.05
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SendTimeout(f"could not end transaction message {prepared.message_id} within "
                                  f"{self.send_timeout}s; a back-check will settle it")
            try:
                conn = await self._tx_connection(prepared, min(remaining, self.options.connect_timeout))
                answer = await asyncio.wait_for(
                    conn.request(p.EndTx(conn.next_ref(), prepared.topic, prepared.message_id, commit)), remaining)
                return answer.state
            except BrokerError as exc:
                if not self._moved(prepared, exc, conn):
                    raise
                await asyncio.sleep(delay)  # its partition is led elsewhere now (replicated: the leader holds it)
                delay = min(delay * 2, 1.0)
            except (OSError, SwitchyardError, TimeoutError) as exc:
                log.debug("ending %s on %s: %s", prepared.message_id, prepared.broker, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _tx_connection(self, prepared: PreparedMessage, timeout: float) -> BrokerConnection:
        """Where a prepared message is ended: its partition's leader now (a failover moved it there with its
        replicas), else the broker that stored it."""
        if prepared.partition is not None and prepared.topic in self._topic_links:
            conn = self._topic_links[prepared.topic].tx_target(prepared.topic, None, prepared.partition)[1]
            if conn is not None:
                return conn
        return await self._connection_to(prepared.broker, timeout)

    def _moved(self, prepared: PreparedMessage, exc: BrokerError, conn: BrokerConnection) -> bool:
        """A refusal that means "not here (any more)": the partition's leader is elsewhere now."""
        link = self._topic_links.get(prepared.topic)
        return (prepared.partition is not None and link is not None and exc.code in (
            p.E_NOT_LEADER, p.E_UNKNOWN_MESSAGE, p.E_NOT_ENOUGH_REPLICAS)
            and (exc.code != p.E_UNKNOWN_MESSAGE or not link.leads(prepared.topic, prepared.partition,
                                                                   conn.address.node_id)))

    async def _connection_to(self, address: BrokerAddress, timeout: float) -> BrokerConnection:
        """An open connection to one broker (where a prepared message lives), of whichever cluster."""
        mine = [link.conn for link in self._links.values()] + [c.connection(address) for c in self._checks.values()]
        for conn in [*mine, self._extra.get(address)]:
            if conn is not None and conn.is_open and conn.address == address:
                return conn
        conn = await BrokerConnection.open(address, timeout=timeout, **self.conn_args())
        self._extra[address] = conn
        return conn

    async def send_transactional(self, topic: str, body: bytes, local_transaction: Callable, *,
                                 message_type: str = "default", key: str | None = None,
                                 business_id: str | None = None, headers: dict[str, str] | None = None) -> TxResult:
        """Prepare, run `local_transaction(message_id)` (sync or async), then commit when it returns or
        roll back when it raises (the exception propagates after the rollback)."""
        prepared = await self.prepare(topic, body, message_type=message_type, key=key, business_id=business_id,
                                      headers=headers)
        try:
            outcome = local_transaction(prepared.message_id)
            if inspect.isawaitable(outcome):
                await outcome
        except BaseException:
            await self._end_quietly(prepared, commit=False)
            raise
        return TxResult(prepared.message_id, await self._end_quietly(prepared, commit=True))

    async def _end_quietly(self, prepared: PreparedMessage, commit: bool) -> str:
        """End a transaction; when the broker cannot be reached in time the back-check decides."""
        try:
            return await self.end_transaction(prepared, commit)
        except SendTimeout as exc:
            log.warning("%s", exc)
            return p.TX_PREPARED
