"""What an audit record changed: its before and after compared field by field (read side only; the record
itself is never altered)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

SUMMARY_FIELDS = 3
SUMMARY_VALUE_CHARS = 40


@dataclass(frozen=True)
class Change:
    """One field of a record's object: `kind` is "changed", "added" (no value before) or "removed" (none after).
    For two lists, what the new one adds and drops."""

    field: str
    kind: str
    before: object = None
    after: object = None
    added: list = field(default_factory=list)
    removed: list = field(default_factory=list)

    @property
    def before_text(self) -> str:
        return shown(self.before) if self.kind != "added" else "—"

    @property
    def after_text(self) -> str:
        return shown(self.after) if self.kind != "removed" else "—"


def shown(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _fields(value) -> dict:
    if value is None:
        return {}
    return value if isinstance(value, dict) else {"value": value}


def changes(before: dict | None, after: dict | None) -> list[Change]:
    """The fields whose value differs, by name (PostgreSQL's jsonb keeps no key order); a value that is not an
    object compares as one field, "value"."""
    old, new = _fields(before), _fields(after)
    out = []
    for name in sorted(set(old) | set(new)):
        if name in old and name in new:
            if old[name] == new[name]:
                continue
            added = removed = []
            if isinstance(old[name], list) and isinstance(new[name], list):
                added = [v for v in new[name] if v not in old[name]]
                removed = [v for v in old[name] if v not in new[name]]
            out.append(Change(name, "changed", old[name], new[name], added, removed))
        elif name in new:
            out.append(Change(name, "added", None, new[name]))
        else:
            out.append(Change(name, "removed", old[name], None))
    return out


def _cut(text: str) -> str:
    return text if len(text) <= SUMMARY_VALUE_CHARS else text[: SUMMARY_VALUE_CHARS - 1] + "…"


def _line(c: Change) -> str:
    if c.kind == "added":
        return f"{c.field} = {_cut(c.after_text)}"
    if c.kind == "removed":
        return f"{c.field} (was {_cut(c.before_text)})"
    return f"{c.field} {_cut(c.before_text)} → {_cut(c.after_text)}"


def summary(before: dict | None, after: dict | None) -> str:
    """One line for the list: `retention_hours 48 → 96; application = C-12; +2 more` (added fields as `= value`,
    removed ones as `(was value)`)."""
    rows = changes(before, after)
    parts = [_line(c) for c in rows[:SUMMARY_FIELDS]]
    if len(rows) > SUMMARY_FIELDS:
        parts.append(f"+{len(rows) - SUMMARY_FIELDS} more")
    return "; ".join(parts)
