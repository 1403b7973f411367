"""A publish batch's trace columns (columns.message_parts): the compiled module (_parts.pyx, built by the
install) and the Python way it falls back to give the same parts, written out here case by case: ids joined
by NUL unless one holds a NUL or is not a string, a string column that is all null as None, all equal as one
Run, else joined or as its values, the body sizes as one Run when equal, else each."""

from __future__ import annotations

import pytest

from broker_core.protocol import message
from broker_core.tracing import columns
from broker_core.tracing.columns import python_message_parts
from broker_core.tracing.values import joined, run


class Label(str):
    """A str subclass (joined like a str)."""


def _arrays(*specs) -> list[list]:
    """Message arrays from (id, type, key, business id, body)."""
    return [message(mid, mtype, body, key=key, business_id=bid) for mid, mtype, key, bid, body in specs]


def _equal_not_identical(text: str) -> str:
    return "".join(list(text))  # a new str object of the same value


CASES = {
    "one type, no key, equal bodies": (
        _arrays(("m-1", "t", None, None, b"abc"), ("m-2", "t", None, None, b"xyz")), True,
        [joined("m-1\0m-2", 2), run("t", 2), None, None, None, run(3, 2)]),
    "not sized": (
        _arrays(("m-1", "t", None, None, b"abc"), ("m-2", "t", None, None, b"xy")), False,
        [joined("m-1\0m-2", 2), run("t", 2), None, None, None, None]),
    "types, keys and business ids that differ; bodies of several sizes": (
        _arrays(("m-1", "a", "k1", "b1", b""), ("m-2", "b", "k2", "b1", b"12"), ("m-3", "a", "k3", "b1", b"1")), True,
        [joined("m-1\0m-2\0m-3", 3), joined("a\0b\0a", 3), joined("k1\0k2\0k3", 3), run("b1", 3), None, [0, 2, 1]]),
    "equal values as distinct objects make one Run": (
        _arrays(("m-1", _equal_not_identical("order.paid"), _equal_not_identical("k"), None, b"1"),
                ("m-2", _equal_not_identical("order.paid"), _equal_not_identical("k"), None, b"2")), True,
        [joined("m-1\0m-2", 2), run("order.paid", 2), run("k", 2), None, None, run(1, 2)]),
    "a NUL in an id, a key or a business id: its values": (
        _arrays(("m\0-1", "t", "k\0", "b1", b""), ("m-2", "t", "k2", "b\0", b"")), True,
        [["m\0-1", "m-2"], run("t", 2), ["k\0", "k2"], ["b1", "b\0"], None, run(0, 2)]),
    "a NUL in a wide string": (
        _arrays(("m-€", "t", None, None, b""), ("m-\0€", "t", None, None, b"")), True,
        [["m-€", "m-\0€"], run("t", 2), None, None, None, run(0, 2)]),
    "wide and non-ASCII strings without a NUL": (
        _arrays(("m-€", "tü", "ключ", None, b""), ("m-ü", "tü", "k", None, b"")), True,
        [joined("m-€\0m-ü", 2), run("tü", 2), joined("ключ\0k", 2), None, None, run(0, 2)]),
    "a null among keys; a value of another type": (
        _arrays(("m-1", "t", None, 7, b""), ("m-2", "t", "k", "b", b"")), True,
        [joined("m-1\0m-2", 2), run("t", 2), [None, "k"], [7, "b"], None, run(0, 2)]),
    "an id that is not a string": (
        _arrays((17, "t", None, None, b""), ("m-2", "t", None, None, b"")), True,
        [[17, "m-2"], run("t", 2), None, None, None, run(0, 2)]),
    "ids of a str subclass": (
        _arrays((Label("m-1"), "t", None, None, b"a"), ("m-2", "t", None, None, b"b")), True,
        [joined("m-1\0m-2", 2), run("t", 2), None, None, None, run(1, 2)]),
    "one message": (
        _arrays(("m-1", "t", "k", "b", b"abcd")), True,
        [joined("m-1", 1), run("t", 1), run("k", 1), run("b", 1), None, run(4, 1)]),
    "a body that is not bytes": (
        [["m-1", "t", None, None, {}, bytearray(b"abc"), 0, 0, 0, 0], ["m-2", "t", None, None, {}, b"abc", 0, 0, 0, 0]],
        True, [joined("m-1\0m-2", 2), run("t", 2), None, None, None, run(3, 2)]),
}


def test_the_compiled_module_is_built_by_the_install():
    """`./dev` installs the project with `pip install -e`, which compiles _parts.pyx: a broker traced in this
    environment takes the compiled way (without it, the Python way, at four times the CPU)."""
    assert columns._parts is not None


@pytest.mark.parametrize("case", CASES)
def test_the_python_way_gives_the_parts_written_out(case):
    arrays, sized, expected = CASES[case]
    assert python_message_parts(arrays, sized) == expected


@pytest.mark.parametrize("case", CASES)
def test_the_compiled_module_gives_the_parts_written_out(case):
    arrays, sized, expected = CASES[case]
    assert columns._parts.message_parts(arrays, sized) == expected
    assert columns.message_parts(arrays, sized) == expected


def test_what_the_compiled_module_does_not_take_goes_the_python_way():
    """Arrays that are tuples, or lists shorter than the fields up to the body: the compiled module declines
    (None) and message_parts gives the Python way's parts."""
    as_tuples = [tuple(a) for a in _arrays(("m-1", "t", None, None, b"ab"), ("m-2", "t", None, None, b"cd"))]
    short = [["m-1", "t", None, None, {}], ["m-2", "t", None, None, {}]]
    assert columns._parts.message_parts(list(as_tuples), True) is None
    assert columns._parts.message_parts(short, False) is None
    assert columns._parts.message_parts([], True) is None
    assert columns.message_parts(as_tuples, True) == [joined("m-1\0m-2", 2), run("t", 2), None, None, None, run(2, 2)]
    assert columns.message_parts(short, False) == [joined("m-1\0m-2", 2), run("t", 2), None, None, None, None]


def test_a_source_tree_without_the_compiled_module_records_the_same(monkeypatch):
    """A broker run where _parts.pyx was not built records a publish batch with the same parts."""
    arrays, sized, expected = CASES["types, keys and business ids that differ; bodies of several sizes"]
    monkeypatch.setattr(columns, "_parts", None)
    assert columns.message_parts(arrays, sized) == expected
