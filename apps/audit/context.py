"""Who is acting, from where: the request id and source every audit record carries.

The web middleware, the API, management commands and Celery tasks each enter an
action context; actions read it when they write their audit record.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

SOURCES = ("web", "api", "cli", "task", "system")


@dataclass(frozen=True)
class ActionContext:
    source: str
    request_id: str


_current: ContextVar[ActionContext | None] = ContextVar("switchyard_action_context", default=None)


def current() -> ActionContext:
    ctx = _current.get()
    if ctx is None:
        # Outside any entry point (a shell, a script): treat as the command line.
        return ActionContext(source="cli", request_id=uuid.uuid4().hex)
    return ctx


@contextmanager
def action_context(source: str, request_id: str | None = None) -> Iterator[ActionContext]:
    if source not in SOURCES:
        raise ValueError(f"unknown action source {source!r}; expected one of {SOURCES}")
    ctx = ActionContext(source=source, request_id=request_id or uuid.uuid4().hex)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
