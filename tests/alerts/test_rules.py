"""Alarm rules through REST: who may hold which rule (SREs any, a team its own topics' thresholds), every change
audited, bad input answered with field errors and nothing changed; what a rule renders into for Prometheus and
Alertmanager."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def estate(people, make_cluster, approved_topic):
    cluster = make_cluster()
    return cluster, approved_topic(cluster)


def backlog_rule(cluster, topic, **overrides) -> dict:
    return {"name": "order backlog", "kind": "backlog", "cluster": cluster.name, "topic": topic.pk,
            "group": "billing", "threshold": 1000, "for_seconds": 60, "webhook_urls": ["https://hooks.example/a"],
            "emails": ["payments@example.com"], **overrides}


def audit_of(rule_id) -> list[tuple[str, str]]:
    from apps.audit.models import AuditRecord

    return list(AuditRecord.objects.filter(object_type="alerts.alertrule", object_id=str(rule_id))
                .order_by("id").values_list("action", "actor_name"))


def test_who_may_hold_which_rule(people, estate, api_for):
    from apps.alerts.models import AlertRule

    cluster, topic = estate
    # a payments developer: a threshold on the team's own topic
    mine = api_for(people.dev).post("/api/v1/monitoring/alert-rules/", backlog_rule(cluster, topic), format="json")
    assert mine.status_code == 201, mine.content
    rule_id = mine.json()["id"]
    # another team's developer: not on payments' topic, neither adding nor changing
    assert api_for(people.consumer).post("/api/v1/monitoring/alert-rules/", backlog_rule(cluster, topic, name="theirs"),
                                         format="json").status_code == 403
    assert api_for(people.consumer).patch(f"/api/v1/monitoring/alert-rules/{rule_id}/", {"threshold": 1},
                                          format="json").status_code == 403
    # a developer: no cluster-wide alarm, nor a topic alarm without its topic
    assert api_for(people.dev).post("/api/v1/monitoring/alert-rules/", {"name": "down", "kind": "broker_down",
                                                             "cluster": cluster.name}, format="json").status_code == 403
    assert api_for(people.dev).post("/api/v1/monitoring/alert-rules/", {**backlog_rule(cluster, topic, name="any"), "topic": None},
                                    format="json").status_code == 403
    # an auditor reads, never writes
    assert api_for(people.auditor).get("/api/v1/monitoring/alert-rules/").json()["results"][0]["id"] == rule_id
    assert api_for(people.auditor).post("/api/v1/monitoring/alert-rules/", backlog_rule(cluster, topic, name="x"),
                                        format="json").status_code == 403
    # the team's approver changes the threshold; the SRE adds a cluster-wide rule and removes the team's
    changed = api_for(people.lead).patch(f"/api/v1/monitoring/alert-rules/{rule_id}/", {"threshold": 5000}, format="json")
    assert changed.status_code == 200 and changed.json()["threshold"] == 5000
    down = api_for(people.sre).post("/api/v1/monitoring/alert-rules/", {"name": "a broker is down", "kind": "broker_down",
                                                             "cluster": cluster.name, "threshold": 2}, format="json")
    assert down.status_code == 201, down.content
    assert api_for(people.sre).delete(f"/api/v1/monitoring/alert-rules/{rule_id}/").status_code == 204
    assert list(AlertRule.objects.values_list("name", flat=True)) == ["a broker is down"]
    assert audit_of(rule_id) == [("alert_rule.create", "dev-pay"), ("alert_rule.update", "lead-pay"),
                                 ("alert_rule.delete", "sre-1")]
    assert audit_of(down.json()["id"]) == [("alert_rule.create", "sre-1")]


def test_bad_input_is_refused_with_field_errors_and_changes_nothing(people, estate, api_for):
    from apps.alerts.models import AlertRule
    from apps.audit.models import AuditRecord

    cluster, topic = estate
    sre = api_for(people.sre)
    bad = sre.post("/api/v1/monitoring/alert-rules/", backlog_rule(cluster, topic, kind="cpu", threshold=-1), format="json")
    assert bad.status_code == 400 and {"kind", "threshold"} <= set(bad.json()), bad.content
    bad = sre.post("/api/v1/monitoring/alert-rules/", backlog_rule(cluster, topic, webhook_urls=["ftp://hooks.example/a"],
                                                        emails=["not-an-address"], group="bad group!"), format="json")
    assert bad.status_code == 400
    assert set(bad.json()) == {"webhook_urls", "emails", "group"}, bad.content
    bad = sre.post("/api/v1/monitoring/alert-rules/", {"name": "drift", "kind": "zookeeper_drift", "cluster": cluster.name,
                                            "topic": topic.pk, "threshold": 0}, format="json")
    assert bad.status_code == 400 and list(bad.json()) == ["topic"], bad.content
    bad = sre.post("/api/v1/monitoring/alert-rules/", {"name": "none", "kind": "no_consumers", "cluster": cluster.name,
                                            "threshold": 0}, format="json")
    assert bad.status_code == 400 and list(bad.json()) == ["threshold"], bad.content
    made = sre.post("/api/v1/monitoring/alert-rules/", backlog_rule(cluster, topic), format="json")
    assert made.status_code == 201
    again = sre.post("/api/v1/monitoring/alert-rules/", backlog_rule(cluster, topic), format="json")
    assert again.status_code == 400 and list(again.json()) == ["name"], again.content
    unchanged = sre.patch(f"/api/v1/monitoring/alert-rules/{made.json()['id']}/", {"for_seconds": -5, "threshold": "lots"},
                          format="json")
    assert unchanged.status_code == 400 and set(unchanged.json()) == {"for_seconds", "threshold"}
    rule = AlertRule.objects.get()
    assert (rule.threshold, rule.for_seconds) == (1000, 60)
    # the one rule made, nothing for what was refused
    assert list(AuditRecord.objects.filter(object_type="alerts.alertrule").values_list("action", flat=True)) == [
        "alert_rule.create"]


def test_rules_render_into_prometheus_rules_and_alertmanager_routes(people, estate, settings):
    from apps.alerts import actions
    from apps.alerts.rendering import alertmanager_config, prometheus_rules

    cluster, topic = estate
    settings.SWITCHYARD_CONTROL_PLANE_URL = "http://cp.example:8000"
    settings.SWITCHYARD_MONITORING_TOKEN_FILE = "/secrets/monitoring-token"
    rule = actions.create_rule(actor=people.dev, name="no consumer", kind="no_consumers", cluster=cluster, topic=topic,
                               group="billing", for_seconds=30, webhook_urls=["https://hooks.example/a"])
    down = actions.create_rule(actor=people.sre, name="down", kind="broker_down", cluster=cluster, threshold=2,
                               emails=["sre@example.com"])
    rendered = json.loads(prometheus_rules([rule, down]))
    [first, second] = rendered["groups"][0]["rules"]
    assert (first["alert"], first["expr"], first["for"]) == (
        "SwitchyardNoConsumers",
        f'sum by (cluster, topic, group) (switchyard_group_consumers{{cluster="{cluster.name}", '
        f'topic="payments.order-paid", group="billing"}}) < 1', "30s")
    assert first["labels"] == {"rule_id": str(rule.pk), "rule": "no consumer", "kind": "no_consumers",
                               "cluster": cluster.name, "topic": "payments.order-paid", "group": "billing"}
    assert second["expr"] == (f'(count((up{{job="switchyard-brokers", cluster="{cluster.name}"}}) == 1) '
                              f'or vector(0)) < 2')
    settings.SWITCHYARD_ALERT_SMTP_SMARTHOST = "mail.example:587"
    settings.SWITCHYARD_ALERT_SMTP_USERNAME = "alerts"
    settings.SWITCHYARD_ALERT_SMTP_PASSWORD_FILE = "/secrets/smtp-password"
    config = json.loads(alertmanager_config([rule, down]))
    assert config["global"] == {"smtp_smarthost": "mail.example:587", "smtp_from": "switchyard-alerts@localhost",
                                "smtp_require_tls": False, "smtp_auth_username": "alerts",
                                "smtp_auth_password_file": "/secrets/smtp-password"}
    assert config["route"]["routes"] == [
        {"receiver": "switchyard-history", "continue": True},
        {"receiver": f"rule-{rule.pk}", "matchers": [f'rule_id="{rule.pk}"'], "continue": True},
        {"receiver": f"rule-{down.pk}", "matchers": [f'rule_id="{down.pk}"'], "continue": True},
    ]
    assert config["receivers"] == [
        {"name": "switchyard-history", "webhook_configs": [{
            "url": "http://cp.example:8000/alerts/notify", "send_resolved": True, "max_alerts": 0,
            "http_config": {"authorization": {"type": "Bearer", "credentials_file": "/secrets/monitoring-token"}}}]},
        {"name": f"rule-{rule.pk}", "webhook_configs": [{"url": "https://hooks.example/a", "send_resolved": True}]},
        {"name": f"rule-{down.pk}", "email_configs": [{"to": "sre@example.com", "send_resolved": True}]},
    ]


def test_every_kind_renders_files_prometheus_and_alertmanager_accept(people, estate, settings, tmp_path):
    """Each kind's rule, checked by Prometheus' and Alertmanager's own tools (promtool, amtool)."""
    import subprocess

    from apps.alerts import actions
    from apps.alerts.choices import TOPIC_KINDS, RuleKind
    from apps.alerts.rendering import alertmanager_config, prometheus_rules

    cluster, topic = estate
    settings.SWITCHYARD_MONITORING_TOKEN_FILE = str(tmp_path / "token")
    settings.SWITCHYARD_ALERT_SMTP_USERNAME = "alerts"
    settings.SWITCHYARD_ALERT_SMTP_PASSWORD_FILE = str(tmp_path / "smtp-password")
    rules = [actions.create_rule(actor=people.sre, name=f"rule {kind}", kind=kind, cluster=cluster,
                                 topic=topic if kind in TOPIC_KINDS else None, threshold=3, for_seconds=10,
                                 webhook_urls=["https://hooks.example/a"], emails=["sre@example.com"])
             for kind in RuleKind.values]
    (tmp_path / "rules.yml").write_text(prometheus_rules(rules))
    (tmp_path / "alertmanager.yml").write_text(alertmanager_config(rules))
    checked = subprocess.run(["promtool", "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True)
    assert checked.returncode == 0 and f"SUCCESS: {len(RuleKind.values)} rules found" in checked.stdout, checked
    checked = subprocess.run(["amtool", "check-config", str(tmp_path / "alertmanager.yml")], capture_output=True,
                             text=True)
    assert checked.returncode == 0 and f"{len(RuleKind.values) + 1} receivers" in checked.stdout, checked


def test_alertmanager_not_answering_is_refused_with_a_detail_and_changes_nothing(people, api_for, settings):
    import socket

    from apps.audit.models import AuditRecord

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        settings.SWITCHYARD_ALERTMANAGER_URL = f"http://127.0.0.1:{closed.getsockname()[1]}"
    firing = api_for(people.sre).get("/api/v1/monitoring/firing/")
    # the platform's refusal (409, the API contract's "what to do" detail), not a server error
    assert firing.status_code == 409 and "did not answer" in firing.json()["detail"]
    made = api_for(people.sre).post("/api/v1/monitoring/silences/", {"matchers": {"rule_id": "1"}, "hours": 1,
                                                                      "comment": "maintenance"}, format="json")
    assert made.status_code == 409
    assert not AuditRecord.objects.filter(object_type="alertmanager.silence").exists()
