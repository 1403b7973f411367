"""The one way tests (and the dev stack) wait for something: poll a predicate until it holds or a bound passes.

No pytest here: devstack waits for its services with it too."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 30.0, what: str = "condition", interval: float = 0.2, *,
             error: type[Exception] = AssertionError):
    """Poll until predicate() is truthy; returns its value. A bound, not a timing assertion: past `timeout` it
    raises `error` naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"gave up waiting for {what} after {timeout:g}s (last value {value!r})")
        time.sleep(interval)


def wait_closely(predicate, timeout: float, what: str):
    """wait_for polling every 20 ms: for what a broker does in milliseconds."""
    return wait_for(predicate, timeout, what, interval=0.02)


def holds_within(predicate, seconds: float, interval: float = 0.02) -> bool:
    """Whether predicate() holds within `seconds` (False, not an error, when it does not)."""
    try:
        wait_for(predicate, seconds, interval=interval)
    except AssertionError:
        return False
    return True
