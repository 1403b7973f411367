"""A publish batch's trace columns, taken from the broker's message arrays: what a record ships of its messages
(records.py). The compiled way (`_parts.pyx`, Cython, built by the install) where it was built, else the same
in Python; both give the same parts (tests/broker/test_trace_parts.py).

A column of strings ships as None when all are null, a Run when all are equal (often: one type, no key, no
business id), Joined (one text joined by NUL) when they are strings without a NUL, else as its values; the
body sizes as a Run when all are equal, else each. Run and Joined are made as they are shipped (values.run,
values.joined: maps).
"""

from __future__ import annotations

from itertools import islice

from broker_core.protocol import M_BODY, M_BUSINESS_ID, M_ID, M_KEY, M_TYPE
from broker_core.tracing.values import joined, run

try:  # built by `pip install` (setup.py); a source tree without it takes the Python way
    from broker_core.tracing import _parts
except ImportError:
    _parts = None

_TAKEN = max(M_ID, M_TYPE, M_KEY, M_BUSINESS_ID, M_BODY) + 1  # the fields a record takes, from the first


def message_parts(arrays, sized: bool) -> list:
    """A record's MESSAGE_VALUES parts from its messages' arrays: ids, types, keys and business ids, no
    attempt, and the body sizes when `sized`. The compiled module's when it takes the arrays (a list of
    lists), at a quarter of the CPU, else `python_message_parts`."""
    if _parts is not None and type(arrays) is list:
        parts = _parts.message_parts(arrays, sized)
        if parts is not None:
            return parts
    return python_message_parts(arrays, sized)


def python_message_parts(arrays, sized: bool) -> list:
    """message_parts in Python: one zip of the arrays, then a C-level pass per column."""
    n = len(arrays)
    columns = _columns(arrays)
    sizes = None
    if sized:
        sizes = list(map(len, columns[M_BODY]))
        if sizes.count(sizes[0]) == n:  # (list.count: a direct loop, not countOf's iterator)
            sizes = run(sizes[0], n)
    return [*_strings(columns, n), None, sizes]


def strings_of(arrays, n: int) -> list:
    """The (ids, types, keys, business ids) parts of n messages' arrays (a frame of messages not nameable)."""
    return _strings(_columns(arrays), n)


def _columns(arrays) -> list[tuple]:
    """The columns a record takes from its messages' arrays, one tuple per field up to the body (ids, types,
    keys, business ids, headers, bodies): one `zip` of the arrays, one pass in C over their values (cheaper
    than a pass per field, in C or in Python), stopped after the body (`islice`): the fields after it
    (ttl, limits, flags, timestamps) are not touched."""
    return list(islice(zip(*arrays, strict=False), _TAKEN))  # (an array may hold more fields than ten)


def _strings(columns: list[tuple], n: int) -> list:
    """A record's (ids, types, keys, business ids) from its messages' columns (ids differ: no Run check)."""
    parts = [_joined(columns[M_ID], n)]
    for values in (columns[M_TYPE], columns[M_KEY], columns[M_BUSINESS_ID]):
        first = values[0]
        if values.count(first) == n:
            parts.append(None if first is None else run(first, n))
        else:
            parts.append(_joined(values, n))
    return parts


def _joined(values, n: int) -> dict | list:
    """n values as one text joined by NUL when they are strings without one, else as a list. (A NUL is looked
    for in the values joined without a separator, by memchr, which costs a tenth of counting the NULs of the
    text joined with one.)"""
    try:
        if "\0" not in "".join(values):
            return joined("\0".join(values), n)
    except TypeError:  # not all strings
        pass
    return list(values)


if _parts is not None:
    _parts.bind(run, joined, _joined, M_ID, M_TYPE, M_KEY, M_BUSINESS_ID, M_BODY)
