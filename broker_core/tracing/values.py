"""How a record holds a column of its messages' values when not as a plain list (records.py, columns.py)."""

from __future__ import annotations

from typing import NamedTuple


class Run(NamedTuple):
    """n messages' values that are all `value`."""

    value: object
    n: int

    def __len__(self) -> int:
        return self.n


class Joined(NamedTuple):
    """n strings without a NUL, joined by NUL: one object for the broker to keep and ship."""

    text: str
    n: int

    def __len__(self) -> int:
        return self.n
