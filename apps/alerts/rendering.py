"""Alarm rules → Prometheus rule file and Alertmanager configuration (both YAML; JSON is YAML).

Every alert carries the labels `rule_id`, `rule`, `kind` and `cluster` (and `topic`, `group` where the rule names
them), so Alertmanager routes it to its rule's receivers and the console links it to its rule. The expressions
read the brokers' figures (broker_core/http.py: `switchyard_group_*`, `switchyard_broker_auth_failures_total`),
Prometheus' own `up` of the broker targets, and the control plane's figures (apps/alerts/metrics.py).
"""

from __future__ import annotations

import json

from django.conf import settings

from apps.alerts.choices import RuleKind
from apps.alerts.models import AlertRule

BROKERS_JOB = "switchyard-brokers"  # devstack/monitoring.py
HISTORY_RECEIVER = "switchyard-history"
ALERT_NAMES = {
    RuleKind.LAG_AGE: "SwitchyardLagAge",
    RuleKind.BACKLOG: "SwitchyardBacklog",
    RuleKind.NO_CONSUMERS: "SwitchyardNoConsumers",
    RuleKind.AUTH_FAILURES: "SwitchyardAuthFailures",
    RuleKind.UNRESOLVED_TX: "SwitchyardUnresolvedTransactions",
    RuleKind.BROKER_DOWN: "SwitchyardBrokerDown",
    RuleKind.ZOOKEEPER_DRIFT: "SwitchyardZooKeeperDrift",
    RuleKind.UNDER_REPLICATED: "SwitchyardUnderReplicatedPartitions",
    RuleKind.TRACE_DROPPED: "SwitchyardTraceEventsDropped",
}


# what fires, in words for notifications and e-mail ({t}: the threshold)
CONDITIONS = {
    RuleKind.LAG_AGE: "oldest waiting message older than {t} s",
    RuleKind.BACKLOG: "backlog above {t} messages",
    RuleKind.NO_CONSUMERS: "fewer consumers connected than {t}",
    RuleKind.AUTH_FAILURES: "more than {t} authentication failures in 5 minutes",
    RuleKind.UNRESOLVED_TX: "more than {t} unresolved transaction messages",
    RuleKind.BROKER_DOWN: "fewer live brokers than {t}",
    RuleKind.ZOOKEEPER_DRIFT: "more than {t} ZooKeeper nodes drifted",
    RuleKind.UNDER_REPLICATED: "more than {t} partitions under-replicated",
    RuleKind.TRACE_DROPPED: "more than {t} trace events dropped in 5 minutes (a trace process too far behind)",
}


def _q(value: str) -> str:
    """A PromQL string literal (double-quoted, escaped like Go: JSON's escaping is a subset)."""
    return json.dumps(value)


def _selector(rule: AlertRule, with_group: bool = True, **extra: str) -> str:
    matchers = [f"cluster={_q(rule.cluster.name)}"]
    if rule.topic_id is not None:
        matchers.append(f"topic={_q(rule.topic.name)}")
    if with_group and rule.group:
        matchers.append(f"group={_q(rule.group)}")
    matchers += [f"{k}={_q(v)}" for k, v in extra.items()]
    return "{" + ", ".join(matchers) + "}"


def expression(rule: AlertRule) -> str:
    t = f"{rule.threshold:g}"
    s = _selector(rule)
    kind = rule.kind
    if kind == RuleKind.LAG_AGE:
        return f"max by (cluster, topic, group) (switchyard_group_oldest_age_seconds{s}) > {t}"
    if kind == RuleKind.BACKLOG:
        return f"sum by (cluster, topic, group) (switchyard_group_depth{s}) > {t}"
    if kind == RuleKind.NO_CONSUMERS:
        # consumers connected to the group on every live broker together
        return f"sum by (cluster, topic, group) (switchyard_group_consumers{s}) < {t}"
    if kind == RuleKind.AUTH_FAILURES:
        return f"sum by (cluster) (increase(switchyard_broker_auth_failures_total{s}[5m])) > {t}"
    if kind == RuleKind.TRACE_DROPPED:
        return f"sum by (cluster) (increase(switchyard_broker_trace_events_dropped_total{s}[5m])) > {t}"
    if kind == RuleKind.UNRESOLVED_TX:
        return f"sum by (cluster, topic) (switchyard_tx_unresolved_total{s}) > {t}"
    if kind == RuleKind.BROKER_DOWN:
        up = f"up{{job={_q(BROKERS_JOB)}, cluster={_q(rule.cluster.name)}}}"
        # brokers leave the targets when their ZooKeeper registration goes: count the live ones, none = 0
        return f"(count(({up}) == 1) or vector(0)) < {t}"
    if kind == RuleKind.ZOOKEEPER_DRIFT:
        return f"max by (cluster) (switchyard_zookeeper_drift_objects{s}) > {t}"
    if kind == RuleKind.UNDER_REPLICATED:  # the control plane's figure (apps/clusters/metrics.py)
        return f"max by (cluster) (switchyard_under_replicated_partitions{s}) > {t}"
    raise ValueError(f"unknown rule kind {kind!r}")


def _literal(text: str) -> str:
    """Text Prometheus takes as it is: labels and annotations are Go templates to it, so text with '{{' (a rule's
    name may have it) goes in as a template string constant; otherwise one such name breaks the whole rule file."""
    return "{{ " + json.dumps(text) + " }}" if "{{" in text else text


def rule_labels(rule: AlertRule) -> dict[str, str]:
    labels = {"rule_id": str(rule.pk), "rule": _literal(rule.name), "kind": rule.kind, "cluster": rule.cluster.name}
    if rule.topic_id is not None:
        labels["topic"] = rule.topic.name
    if rule.group:
        labels["group"] = rule.group
    return labels


def prometheus_rules(rules) -> str:
    entries = []
    for rule in rules:
        what = CONDITIONS[rule.kind].format(t=f"{rule.threshold:g}")
        entries.append({
            "alert": ALERT_NAMES[rule.kind],
            "expr": expression(rule),
            "for": f"{rule.for_seconds}s",
            "labels": rule_labels(rule),
            "annotations": {
                "summary": _literal(f"{rule.name}: {what} on {rule.cluster.name}"
                                    + (f" / {rule.topic.name}" if rule.topic_id else "")
                                    + (f" / {rule.group}" if rule.group else "")),
                "value": "{{ $value | humanize }}",  # 4 significant digits: 94.44, 1.1k
            },
        })
    return json.dumps({"groups": [{"name": "switchyard", "rules": entries}]}, indent=2)


def alertmanager_config(rules) -> str:
    history_webhook = {"url": f"{settings.SWITCHYARD_CONTROL_PLANE_URL}/alerts/notify", "send_resolved": True,
                       "max_alerts": 0}
    if settings.SWITCHYARD_MONITORING_TOKEN_FILE:  # the token's file, never its value, in the configuration
        history_webhook["http_config"] = {"authorization": {"type": "Bearer",
                                                            "credentials_file": settings.SWITCHYARD_MONITORING_TOKEN_FILE}}
    receivers = [{"name": HISTORY_RECEIVER, "webhook_configs": [history_webhook]}]
    routes = [{"receiver": HISTORY_RECEIVER, "continue": True}]  # every alert, to the console's history
    for rule in rules:
        if not (rule.webhook_urls or rule.emails):
            continue
        name = f"rule-{rule.pk}"
        receiver = {"name": name}
        if rule.webhook_urls:
            receiver["webhook_configs"] = [{"url": url, "send_resolved": True} for url in rule.webhook_urls]
        if rule.emails:
            receiver["email_configs"] = [{"to": address, "send_resolved": True} for address in rule.emails]
        receivers.append(receiver)
        routes.append({"receiver": name, "matchers": [f"rule_id={_q(str(rule.pk))}"], "continue": True})
    smtp = {"smtp_smarthost": settings.SWITCHYARD_ALERT_SMTP_SMARTHOST, "smtp_from": settings.SWITCHYARD_ALERT_SMTP_FROM,
            "smtp_require_tls": settings.SWITCHYARD_ALERT_SMTP_REQUIRE_TLS}
    if settings.SWITCHYARD_ALERT_SMTP_USERNAME:  # the password's file, never the password
        smtp["smtp_auth_username"] = settings.SWITCHYARD_ALERT_SMTP_USERNAME
        smtp["smtp_auth_password_file"] = settings.SWITCHYARD_ALERT_SMTP_PASSWORD_FILE
    config = {
        "global": smtp,
        "route": {"receiver": HISTORY_RECEIVER, "group_by": ["alertname", "rule_id", "cluster", "topic", "group"],
                  "group_wait": settings.SWITCHYARD_ALERT_GROUP_WAIT,
                  "group_interval": settings.SWITCHYARD_ALERT_GROUP_INTERVAL,
                  "repeat_interval": settings.SWITCHYARD_ALERT_REPEAT_INTERVAL, "routes": routes},
        "receivers": receivers,
    }
    return json.dumps(config, indent=2)
