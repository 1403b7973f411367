"""How a record holds a column of its messages' values when not as a plain list (records.py, columns.py).

The broker makes them as they are shipped, msgpack-ready maps (`run`, `joined`: a dict literal costs a
quarter of a named tuple, and the shipment packs them as they are); the trace process reads them back as
`Run` and `Joined` (`read_part`), which the Decoder takes.
"""

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


def run(value: object, n: int) -> dict:
    """A Run as the broker ships it."""
    return {"v": value, "n": n}


def joined(text: str, n: int) -> dict:
    """A Joined as the broker ships it."""
    return {"j": text, "n": n}


def read_part(part):
    """A shipped part as the Decoder takes it: the maps of `run` and `joined` as Run and Joined, the rest as it is."""
    if type(part) is not dict:
        return part
    return Run(part["v"], part["n"]) if "v" in part else Joined(part["j"], part["n"])
