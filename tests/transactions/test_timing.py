"""Due times of back-checks, on hand-written expectations."""

from datetime import UTC, datetime

import pytest

from apps.transactions import timing

T0 = datetime(2025, 1, 31, 8, 0, 0, tzinfo=UTC)


def test_first_check_after_the_delay():
    assert timing.first_check_at(T0, 6) == datetime(2025, 1, 31, 8, 0, 6, tzinfo=UTC)


@pytest.mark.parametrize(("checks_done", "wait"), [(1, 30), (2, 60), (3, 120), (4, 120), (14, 120)])
def test_wait_doubles_up_to_four_intervals(checks_done, wait):
    assert timing.wait_after(checks_done, 30) == wait


def test_next_check_counts_from_now():
    assert timing.next_check_at(T0, 2, 1) == datetime(2025, 1, 31, 8, 0, 2, tzinfo=UTC)


def test_wait_before_any_check_is_refused():
    with pytest.raises(ValueError):
        timing.wait_after(0, 30)


def test_exhausted_at_the_max():
    assert not timing.exhausted(14, 15)
    assert timing.exhausted(15, 15)
    assert timing.exhausted(16, 15)


def test_check_window():
    # RocketMQ's defaults: 6 s, then waits of 30, 60, then 120 s twelve times (15 checks in all)
    assert timing.check_window_s(6, 30, 15) == 6 + 30 + 60 + 12 * 120
    assert timing.check_window_s(1, 1, 1) == 1
    assert timing.check_window_s(1, 1, 3) == 1 + 1 + 2
