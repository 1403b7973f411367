"""Shared pieces of the broker's admin API (broker_core.admin.api): errors, input checks, waiting for the store.

Bad input raises `BadRequest` (a 400 `invalid` unless it says otherwise) before anything changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from broker_core.cluster.state import ClusterState
from broker_core.delivery.topic import Topic
from broker_core.delivery.transactions import TxService
from broker_core.storage.store import DoneCallback

Answer = tuple[int, dict]
MAX_IDS = 1000
STORE_WAIT_S = 30.0  # durable records normally take milliseconds; a stuck disk must not hang the call


class NodeView(Protocol):
    """What the HTTP side reads of the broker node, on its event loop (`broker_core.node.broker.Broker` is one).
    The node hands itself in; nothing here imports it."""

    node_id: str
    topics: dict[str, Topic]
    state: ClusterState
    tx: TxService

    def topic(self, name: str) -> Topic:
        """The topic, opened on this broker if it was not yet."""
        ...

    def stats(self) -> dict: ...


class BadRequest(Exception):
    def __init__(self, message: str, code: str = "invalid", status: int = 400):
        super().__init__(message)
        self.code = code
        self.status = status


def error(status: int, code: str, message: str) -> Answer:
    return status, {"error": code, "message": message}


async def durable(start: Callable[[DoneCallback], object]) -> BaseException | str | None:
    """Start a store write with a completion callback and wait for it: None once durable, else the error (or
    "timed out" after STORE_WAIT_S)."""
    future = asyncio.get_running_loop().create_future()
    start(lambda exc: future.done() or future.set_result(exc))
    try:
        return await asyncio.wait_for(asyncio.shield(future), STORE_WAIT_S)
    except TimeoutError:
        return "timed out"


def topic_and_group(source: dict) -> tuple[str, str]:
    """`topic` and `group`, both required (from a query or a body)."""
    topic, group = source.get("topic"), source.get("group")
    if not isinstance(topic, str) or not topic or not isinstance(group, str) or not group:
        raise BadRequest("topic and group are required strings")
    return topic, group


def int_param(q: dict[str, str], name: str, default, low: int, high: int | None):
    raw = q.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None
    if value < low or (high is not None and value > high):
        raise BadRequest(f"{name} must be between {low} and {high}" if high is not None else
                         f"{name} must be at least {low}")
    return value


def cursor_param(raw: str | None) -> tuple[int, str] | None:
    """A page cursor: "<ms>:<message id>", as a previous answer's next_after gave it."""
    if not raw:
        return None
    ms, sep, message_id = raw.partition(":")
    if not sep or not ms.isdigit() or not message_id:
        raise BadRequest("after must be the next_after of a previous answer")
    return int(ms), message_id


def id_list(body: dict, name: str) -> list[str]:
    ids = body.get(name)
    if not isinstance(ids, list) or not ids or len(ids) > MAX_IDS:
        raise BadRequest(f"{name} must be a list of 1 to {MAX_IDS} message ids")
    for i in ids:
        if not isinstance(i, str) or not 0 < len(i) <= 64:
            raise BadRequest(f"{name} must hold message ids (strings of 1 to 64 characters)")
    return ids
