"""Transaction messages in the SDK: prepare, end (commit / roll back), and answering back-checks.

A prepared message lives on the broker that stored it, so the producer ends it there (also after the
topic's route moved to another cluster), and a producer with a check listener keeps a connection to every
live broker of every cluster its topics' routes name (`CheckSessions` per cluster, the consumer's
approach: follow the broker list, reconnect by itself) so that any broker holding one of its prepared
messages can ask it, through a move too.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from broker_core import protocol as p
from broker_core.client.connection import BrokerAddress, BrokerConnection
from broker_core.client.discovery import BrokerFollower, Discovery
from broker_core.client.errors import AuthError, SwitchyardError
from broker_core.client.options import ClientOptions

log = logging.getLogger("broker_core.client.transactions")


@dataclass(frozen=True)
class TxResult:
    """What `send_transactional` did: the message id and its state on the broker ("committed", or
    "rolled_back" when a back-check had rolled it back first; "prepared" when the commit could not be
    delivered in time: a back-check will settle it)."""

    message_id: str
    state: str


@dataclass(frozen=True)
class PreparedMessage:
    message_id: str
    topic: str
    broker: BrokerAddress  # the broker that stored it
    partition: int | None = None  # its partition (None: the topic has no placement); its leader ends it


@dataclass(frozen=True)
class TxCheck:
    """A back-check: what the check listener is asked about."""

    message_id: str
    topic: str
    message_type: str
    key: str | None
    business_id: str | None
    headers: dict = field(default_factory=dict)


class CheckAnswerer:
    """Runs the producer's check listener for each CheckTx and sends the TxState answer."""

    def __init__(self, listener: Callable):
        self.listener = listener
        self.is_async = inspect.iscoroutinefunction(listener)
        self.tasks: set[asyncio.Task] = set()
        self.answered = 0

    def __call__(self, conn: BrokerConnection, ev: p.CheckTx) -> None:
        task = asyncio.get_running_loop().create_task(self._answer(conn, ev))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, conn: BrokerConnection, ev: p.CheckTx) -> None:
        check = TxCheck(ev.message_id, ev.topic, ev.message_type, ev.key, ev.business_id, dict(ev.headers))
        try:
            if self.is_async:
                answer = await self.listener(check)
            else:  # a plain function may block (a database lookup): not on the loop
                answer = await asyncio.get_running_loop().run_in_executor(None, self.listener, check)
        except Exception:
            log.exception("check listener failed for message %s; answering unknown", ev.message_id)
            answer = p.TX_UNKNOWN
        if answer not in p.TX_ANSWERS:
            answer = p.TX_UNKNOWN
        if conn.is_open:
            conn.send(p.TxState(ev.check_id, ev.message_id, answer))
            self.answered += 1

    def cancel(self) -> None:
        for task in list(self.tasks):
            task.cancel()


class CheckOwner(Protocol):
    """What check connections read of their producer (`producer.AsyncProducer` is one)."""

    options: ClientOptions

    def conn_args(self) -> dict:
        """`BrokerConnection.open` arguments, with the check listener."""
        ...


class CheckSessions:
    """One check-listening connection per live broker of a cluster, kept open until closed."""

    def __init__(self, producer: CheckOwner, discovery: Discovery, forget_after: float = 600.0):
        self.producer = producer
        self.discovery = discovery
        self.conns: dict[BrokerAddress, BrokerConnection] = {}
        self.last_error: BaseException | None = None
        self.closed = False
        # a connection task per listed broker; one that left the list is dropped after `forget_after` away
        self.brokers: BrokerFollower[asyncio.Task] = BrokerFollower(
            discovery, lambda address: asyncio.get_running_loop().create_task(self._run(address)), forget_after)
        self.tasks = self.brokers.items

    async def _run(self, address: BrokerAddress) -> None:
        producer = self.producer
        delay = 0.05
        while not self.closed:
            if self.brokers.gone_too_long(address):
                self.tasks.pop(address, None)
                return
            try:
                conn = await BrokerConnection.open(address, timeout=producer.options.connect_timeout, **producer.conn_args())
            except AuthError as exc:
                self.last_error = exc
                await asyncio.sleep(2.0)
                continue
            except (OSError, SwitchyardError, TimeoutError) as exc:
                self.last_error = exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            delay = 0.05
            self.conns[address] = conn
            await conn.closed
            self.conns.pop(address, None)

    def connection(self, address: BrokerAddress) -> BrokerConnection | None:
        conn = self.conns.get(address)
        return conn if conn is not None and conn.is_open else None

    def connected(self) -> bool:
        """Every broker listed now has an open check connection."""
        return all(self.connection(a) is not None for a in self.discovery.brokers)

    async def close(self) -> None:
        self.closed = True
        self.brokers.close()
        for conn in list(self.conns.values()):
            conn.close()
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()
