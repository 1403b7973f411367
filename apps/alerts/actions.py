"""Writes to alarm rules and silences: atomic, permission-checked, audited.

An SRE (`alerts.manage_any_alertrule`) holds every rule of every cluster. A team's developer or approver holds the
rules on its own team's topics: the rule must name a topic the actor's team owns, and cluster-wide kinds (broker
down, authentication failures, ZooKeeper drift) are the SREs'. After a committed change the control plane renders
Prometheus' rules and Alertmanager's configuration anew and reloads both (apps.alerts.publish).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import EmailValidator, URLValidator
from django.db import transaction

from apps.alerts import alertmanager
from apps.alerts.choices import DEFAULT_THRESHOLDS, GROUP_KINDS, TOPIC_KINDS, RuleKind
from apps.alerts.models import AlertRule
from apps.alerts.publish import publish_soon
from apps.audit.recorder import record
from apps.audit.snapshot import snapshot
from control_plane.errors import require_perm

EDITABLE_FIELDS = ("name", "kind", "cluster", "topic", "group", "threshold", "for_seconds", "webhook_urls", "emails",
                   "enabled")
MAX_RECEIVERS = 10
MAX_FOR_SECONDS = 7 * 86400
GROUP_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
MAX_SILENCE_HOURS = 7 * 24


def _publish_on_commit() -> None:
    transaction.on_commit(publish_soon)


def _check_scope(actor, rule: AlertRule) -> None:
    """Refuse a rule the actor may not hold: an SRE any; a team member only rules on its own team's topics."""
    if actor.has_perm("alerts.manage_any_alertrule"):
        return
    if rule.kind not in TOPIC_KINDS:
        raise PermissionDenied(f"{getattr(actor, 'username', actor)} may not hold a cluster-wide alarm "
                               f"({rule.get_kind_display()}): that is for the cluster's SREs")
    if rule.topic_id is None:
        raise PermissionDenied(f"{getattr(actor, 'username', actor)} may hold alarms on their own team's topics "
                               "only: name the topic")
    if not rule.topic.team.members.filter(pk=actor.pk).exists():
        raise PermissionDenied(f"{getattr(actor, 'username', actor)} is not in team {rule.topic.team.name}, "
                               f"which owns {rule.topic.name}")


def _clean(rule: AlertRule) -> None:
    """Every field error at once (ValidationError with a dict), nothing saved."""
    errors: dict[str, list[str]] = {}

    def add(field, message):
        errors.setdefault(field, []).append(message)

    if rule.kind not in RuleKind.values:
        add("kind", f"choose one of {', '.join(RuleKind.values)}")
    if rule.topic_id is not None and rule.topic.cluster_id != rule.cluster_id:
        add("topic", f"{rule.topic.name} is not on cluster {rule.cluster.name}")
    if rule.kind in RuleKind.values and rule.kind not in TOPIC_KINDS and rule.topic_id is not None:
        add("topic", "this kind watches a whole cluster: leave the topic empty")
    if rule.group:
        if rule.kind not in GROUP_KINDS:
            add("group", "only lag, backlog and consumer alarms watch a consumer group")
        elif not GROUP_NAME.match(rule.group):
            add("group", "a consumer group name: letters, digits, '.', '_' and '-'")
    if not isinstance(rule.threshold, (int, float)) or isinstance(rule.threshold, bool) or rule.threshold < 0:
        add("threshold", "a number of 0 or more")
    elif rule.kind in (RuleKind.NO_CONSUMERS, RuleKind.BROKER_DOWN) and rule.threshold < 1:
        add("threshold", "at least 1 (the alarm fires when fewer are left)")
    if not isinstance(rule.for_seconds, int) or not 0 <= rule.for_seconds <= MAX_FOR_SECONDS:
        add("for_seconds", f"whole seconds from 0 to {MAX_FOR_SECONDS}")
    for field, check, what in (("webhook_urls", URLValidator(schemes=["http", "https"]), "an http(s) URL"),
                               ("emails", EmailValidator(), "an e-mail address")):
        values = getattr(rule, field)
        if not isinstance(values, list) or len(values) > MAX_RECEIVERS:
            add(field, f"a list of at most {MAX_RECEIVERS}")
            continue
        for value in values:
            try:
                if not isinstance(value, str) or len(value) > 500:
                    raise ValidationError("bad")
                check(value)
            except ValidationError:
                add(field, f"{str(value)[:80]!r} is not {what}")
    if rule.cluster_id and AlertRule.objects.filter(cluster_id=rule.cluster_id, name=rule.name).exclude(pk=rule.pk).exists():
        add("name", f"cluster {rule.cluster.name} has a rule of this name already")
    try:
        rule.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                if field not in errors:
                    add(field, message)
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def create_rule(*, actor, **fields) -> AlertRule:
    require_perm(actor, "alerts.add_alertrule")
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise TypeError(f"unknown alarm rule fields: {sorted(unknown)}")
    if "threshold" not in fields and fields.get("kind") in DEFAULT_THRESHOLDS:
        fields["threshold"] = DEFAULT_THRESHOLDS[fields["kind"]]
    rule = AlertRule(**fields, created_by=actor if getattr(actor, "pk", None) else None)
    _clean(rule)
    _check_scope(actor, rule)
    rule.save()
    record(actor=actor, action="alert_rule.create", obj=rule, after=snapshot(rule))
    _publish_on_commit()
    return rule


@transaction.atomic
def update_rule(*, actor, rule: AlertRule, **changes) -> AlertRule:
    require_perm(actor, "alerts.change_alertrule")
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise TypeError(f"unknown alarm rule fields: {sorted(unknown)}")
    rule = AlertRule.objects.select_for_update().get(pk=rule.pk)
    _check_scope(actor, rule)  # the rule as it is, then as it would be
    before = snapshot(rule)
    for key, value in changes.items():
        setattr(rule, key, value)
    _clean(rule)
    _check_scope(actor, rule)
    rule.save()
    record(actor=actor, action="alert_rule.update", obj=rule, before=before, after=snapshot(rule))
    _publish_on_commit()
    return rule


@transaction.atomic
def delete_rule(*, actor, rule: AlertRule) -> None:
    require_perm(actor, "alerts.delete_alertrule")
    rule = AlertRule.objects.select_for_update().get(pk=rule.pk)
    _check_scope(actor, rule)
    before = snapshot(rule)
    record(actor=actor, action="alert_rule.delete", obj=rule, before=before)
    rule.delete()
    _publish_on_commit()


def _silence_errors(matchers, hours, comment) -> dict:
    errors = {}
    if not isinstance(matchers, dict) or not matchers or len(matchers) > 10:
        errors["matchers"] = ["one to ten label: value pairs, e.g. {\"rule_id\": \"12\"}"]
    elif any(not isinstance(k, str) or not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]{0,99}$", k)
             or not isinstance(v, str) or not v or len(v) > 500 for k, v in matchers.items()):
        errors["matchers"] = ["label names are letters, digits and '_'; values non-empty text"]
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not 0 < hours <= MAX_SILENCE_HOURS:
        errors["hours"] = [f"more than 0 and at most {MAX_SILENCE_HOURS}"]
    if not isinstance(comment, str) or not comment.strip() or len(comment) > 1000:
        errors["comment"] = ["say why (at most 1000 characters)"]
    return errors


@transaction.atomic
def create_silence(*, actor, matchers: dict[str, str], hours: float, comment: str) -> str:
    """Silence the alerts whose labels equal `matchers` for `hours`, in Alertmanager; returns its id."""
    require_perm(actor, "alerts.silence_alertevent")
    errors = _silence_errors(matchers, hours, comment)
    if errors:
        raise ValidationError(errors)
    now = datetime.now(UTC)
    body = {"matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in matchers.items()],
            "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=hours)).isoformat(),
            "createdBy": str(getattr(actor, "username", actor)), "comment": comment.strip()}
    silence_id = alertmanager.create_silence(body)
    record(actor=actor, action="alert_silence.create", object_type="alertmanager.silence", object_id=silence_id,
           object_repr=", ".join(f"{k}={v}" for k, v in matchers.items()),
           after={"matchers": matchers, "ends_at": body["endsAt"], "comment": body["comment"]})
    return silence_id


@transaction.atomic
def expire_silence(*, actor, silence_id: str) -> None:
    require_perm(actor, "alerts.silence_alertevent")
    if not re.match(r"^[0-9a-fA-F-]{1,64}$", str(silence_id)):
        raise ValidationError({"silence_id": ["not a silence id"]})
    before = alertmanager.get_silence(silence_id)
    alertmanager.expire_silence(silence_id)
    record(actor=actor, action="alert_silence.expire", object_type="alertmanager.silence", object_id=silence_id,
           object_repr=silence_id, before={"matchers": before.get("matchers"), "ends_at": before.get("endsAt"),
                                           "comment": before.get("comment")})
