"""What a change application may change on each kind of target, and how a change is checked, applied and shown.

A change is `{field: new value}` in JSON (a team by its name): the same body through the form and REST. It is
checked by applying it to an unsaved copy of the target and validating that copy with the model's own rules,
so a change cannot make a topic or binding that a new application could not.
"""

from __future__ import annotations

import copy

from django.core.exceptions import ValidationError

from apps.accounts.models import Team
from apps.lifecycle.choices import Target
from broker_core.layout import MAX_PARTITIONS

CHANGEABLE: dict[str, tuple[str, ...]] = {
    Target.TOPIC: ("message_types", "retention_hours", "max_message_bytes", "tx_check_delay_s", "tx_check_interval_s",
                   "tx_check_max", "partitions", "description", "team"),
    Target.BINDING: ("selector_kind", "selector_pattern", "mode", "delivery_limit", "ttl_s", "backoff_initial_ms",
                     "backoff_max_ms", "backoff_multiplier", "max_in_flight", "on_failure", "description"),
}


def plain(target, field: str):
    """The field's value on `target` as JSON (a team by name; a topic's partitions as it has them, its cluster's
    default when it has none of its own)."""
    if field == "partitions":
        return target.partition_count
    value = getattr(target, field)
    if field == "team":
        return value.name
    return list(value) if isinstance(value, list | tuple) else value


def current(target, fields) -> dict:
    return {f: plain(target, f) for f in fields}


def _coerce(target, field: str, value):
    """`value` as the model field holds it; ValidationError naming the field when it cannot be."""
    if field == "team":
        name = value.name if isinstance(value, Team) else value
        team = Team.objects.filter(name=name).first() if isinstance(name, str) else None
        if team is None:
            raise ValidationError({"team": f"No team named {name!r}."})
        return team
    if field == "partitions":
        return _partitions(value)
    model_field = target._meta.get_field(field)
    try:
        return model_field.to_python(value)
    except ValidationError as exc:
        raise ValidationError({field: exc.messages}) from None


def _partitions(value) -> int:
    """A partition count: a whole number from 1 to MAX_PARTITIONS (what `layout.rescale` places)."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    if number is None or not 1 <= number <= MAX_PARTITIONS:
        raise ValidationError({"partitions": f"Give the number of partitions keys map to, a whole number from 1 to "
                                             f"{MAX_PARTITIONS} (not {value!r})."})
    return number


def would_be(target, changes: dict, errors: dict | None = None):
    """An unsaved copy of `target` with `changes` applied (values coerced, not validated). A value that cannot be
    coerced raises ValidationError, or, given `errors`, is noted there and left out."""
    copied = copy.copy(target)
    copied._state = copy.copy(target._state)
    found: dict[str, list[str]] = {}
    for field, value in changes.items():
        try:
            setattr(copied, field, _coerce(target, field, value))
        except ValidationError as exc:
            found.update(exc.message_dict)
    if found and errors is None:
        raise ValidationError(found)
    if errors is not None:
        errors.update(found)
    return copied


def normalize(target_kind: str, target, changes) -> dict:
    """The changes that differ from the target now, in JSON, validated by the target's model; ValidationError
    with the offending fields otherwise (nothing is saved)."""
    if not isinstance(changes, dict):
        raise ValidationError({"changes": "Give the changes as an object: {field: new value}."})
    allowed = CHANGEABLE[target_kind]
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValidationError({"changes": f"{', '.join(unknown)} cannot be changed on a {target_kind}; "
                                          f"what can: {', '.join(allowed)}."})
    errors: dict[str, list[str]] = {}
    changed = would_be(target, changes, errors)
    others = [f.name for f in target._meta.fields if f.name not in changes or f.name in errors]
    try:
        changed.full_clean(exclude=others, validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    now = current(target, changes)
    out = {f: plain(changed, f) for f in changes}
    return {f: v for f, v in out.items() if v != now[f]}


def apply(target, changes: dict) -> dict:
    """Set `changes` on `target` (unsaved); returns the values it had."""
    before = current(target, changes)
    for field, value in changes.items():
        setattr(target, field, _coerce(target, field, value))
    return before


def _shown(value) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    if value in ("", None):
        return "—"
    return str(value)


def diff_rows(model, before: dict, changes: dict) -> list[dict]:
    """Each changed field: its label, the value before and after (as text), and for lists what was added and
    removed."""
    rows = []
    for field, after in changes.items():
        old = before.get(field)
        row = {"field": field, "label": str(model._meta.get_field(field).verbose_name).capitalize(),
               "before": old, "after": after, "before_text": _shown(old), "after_text": _shown(after)}
        if isinstance(after, list) and isinstance(old, list):
            row["added"] = [v for v in after if v not in old]
            row["removed"] = [v for v in old if v not in after]
        rows.append(row)
    return rows
