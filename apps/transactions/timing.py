"""When a prepared message is checked: pure functions, no database and no clock of their own.

A message prepared at P on a topic with delay D, interval I and max M is first checked at P + D. A check
that ends unknown or unreachable (the n-th, n ≥ 1) sets the next one `wait_after(n, I)` later: I, 2·I, then
4·I from the third on (doubling, capped at BACKOFF_CAP·I). After the M-th such check the message is
exhausted: rolled back and reported unresolved.
"""

from __future__ import annotations

from datetime import datetime, timedelta

BACKOFF_CAP = 4


def wait_after(checks_done: int, interval_s: int) -> int:
    """Seconds between the checks_done-th unanswered check and the next one."""
    if checks_done < 1:
        raise ValueError("wait_after counts from the first check done (checks_done >= 1)")
    return interval_s * min(2 ** (checks_done - 1), BACKOFF_CAP)


def first_check_at(prepared_at: datetime, delay_s: int) -> datetime:
    return prepared_at + timedelta(seconds=delay_s)


def next_check_at(now: datetime, checks_done: int, interval_s: int) -> datetime:
    return now + timedelta(seconds=wait_after(checks_done, interval_s))


def exhausted(checks_done: int, max_checks: int) -> bool:
    return checks_done >= max_checks


def check_window_s(delay_s: int, interval_s: int, max_checks: int) -> int:
    """From prepare to the last check, if no check is ever answered (checks themselves take no time here)."""
    return delay_s + sum(wait_after(n, interval_s) for n in range(1, max_checks))
