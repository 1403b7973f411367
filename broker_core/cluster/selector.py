"""Binding selectors: which message types of a topic a group receives (docs/zookeeper-layout.md)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable

SELECTOR_KINDS = ("exact", "wildcard", "regex")


def compile_selector(selector: dict | None) -> Callable[[str], bool]:
    """A predicate on the message type. No selector, or an empty pattern, matches every type."""
    selector = selector or {}
    kind = selector.get("kind", "wildcard")
    pattern = selector.get("pattern") or ""
    if not pattern or (kind == "wildcard" and pattern == "*"):
        return _any
    if kind == "exact":
        return pattern.__eq__
    if kind == "wildcard":
        return re.compile(fnmatch.translate(pattern)).fullmatch  # type: ignore[return-value]
    if kind == "regex":
        return re.compile(pattern).fullmatch  # type: ignore[return-value]
    raise ValueError(f"unknown selector kind {kind!r} (expected one of {SELECTOR_KINDS})")


def _any(message_type: str) -> bool:
    return True
