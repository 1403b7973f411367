"""Demo governance objects for `./dev up`, made the way people make them: through the actions layer.

On each demo cluster: the payments team's topics `payments.demo-orders` and (transactional)
`payments.demo-payments`, its producing app `payments-demo` with grants on both, and the logistics
team's app `logistics-demo` bound to them (groups `shipping`, `audit-feed`, `ledger`). Every
application is submitted by a developer of the owning team and approved by the topic owner's approver
(and the SRE where the cluster is a prod one), so provisioning writes them into ZooKeeper like
anything else and reconcile finds no drift.

The apps' secrets are shown once at creation; the demo keeps them in a file (mode 0600) that
`devstack/demo_traffic.py` reads. Running it again changes nothing that exists; an app whose secret
is missing from the file gets its secret rotated (audited) and written again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from apps.bindings import actions as binding_actions
from apps.bindings.models import BindingApplication, GrantApplication
from apps.governance.workflow import State
from apps.topics import actions as topic_actions
from apps.topics.models import App, Topic, TopicApplication

PRODUCER_APP = "payments-demo"
CONSUMER_APP = "logistics-demo"
ORDERS = "payments.demo-orders"
PAYMENTS = "payments.demo-payments"

TOPICS = [
    {"name": ORDERS, "message_types": ["order.created", "order.paid", "order.shipped"], "transactional": False,
     "description": "Demo order events", "reason": "Demo traffic for ./dev up"},
    {"name": PAYMENTS, "message_types": ["payment.authorized"], "transactional": True,
     "tx_check_delay_s": 6, "tx_check_interval_s": 10, "tx_check_max": 5,
     "description": "Demo payments, sent as transaction messages", "reason": "Demo of back-checks"},
]
TOPIC_DEFAULTS = {"expected_peak_mps": 50, "max_message_bytes": 4096, "retention_hours": 24, "storage_level": "file",
                  "ordered": False}
BINDINGS = [
    (ORDERS, "shipping", {"selector_kind": "exact", "selector_pattern": "order.paid", "mode": "clustering",
                          "delivery_limit": 3}),
    (ORDERS, "audit-feed", {"selector_kind": "wildcard", "selector_pattern": "order.*", "mode": "broadcast",
                            "delivery_limit": 5}),
    (PAYMENTS, "ledger", {"selector_kind": "wildcard", "selector_pattern": "*", "mode": "clustering",
                          "delivery_limit": 5}),
]
BINDING_DEFAULTS = {"ttl_s": 3600, "backoff_initial_ms": 500, "backoff_max_ms": 10_000, "backoff_multiplier": 2.0,
                    "max_in_flight": 32, "reason": "Demo consumer"}


@dataclass
class Cast:
    producer_dev: object  # a developer of payments
    consumer_dev: object  # a developer of logistics
    approver: object  # an approver of payments (owns the topics)
    sre: object


def _decide(application, cast: Cast, approve) -> None:
    """Approve as the topic owner's approver, then as the SRE while a prod approval is still missing."""
    for actor in (cast.approver, cast.sre):
        application.refresh_from_db()
        if application.state != State.PENDING:
            return
        approve(actor=actor, application=application, comment="demo")


def _app(app_id: str, team, actor, secrets: dict[str, str]) -> App:
    app = App.objects.filter(app_id=app_id).first()
    if app is None:
        app, secrets[app_id] = topic_actions.create_app(actor=actor, app_id=app_id, team=team,
                                                        description="Demo traffic (devstack/demo_traffic.py)")
    elif app_id not in secrets:
        app, secrets[app_id] = topic_actions.rotate_app_secret(actor=actor, app=app)
    return app


def seed(clusters, cast: Cast, secrets_file: Path) -> dict[str, str]:
    """Make the demo apps, topics, grants and bindings on `clusters`; returns {app id: secret}."""
    secrets = json.loads(secrets_file.read_text()) if secrets_file.exists() else {}
    producer = _app(PRODUCER_APP, cast.producer_dev.teams.get(name="payments"), cast.producer_dev, secrets)
    consumer = _app(CONSUMER_APP, cast.consumer_dev.teams.get(name="logistics"), cast.consumer_dev, secrets)
    for cluster in clusters:
        for spec in TOPICS:
            if not TopicApplication.objects.filter(name=spec["name"], cluster=cluster).exists():
                application = topic_actions.create_topic_application(
                    actor=cast.producer_dev, team=producer.team, cluster=cluster, environment=cluster.environment,
                    **TOPIC_DEFAULTS, **spec)
                _decide(application, cast, topic_actions.approve_topic_application)
        for topic_name in (ORDERS, PAYMENTS):
            topic = Topic.objects.filter(name=topic_name, environment=cluster.environment).first()
            if topic is not None and not GrantApplication.objects.filter(topic=topic, app=producer).exists():
                application = binding_actions.create_grant_application(
                    actor=cast.producer_dev, topic=topic, app=producer, reason="Demo producer")
                _decide(application, cast, binding_actions.approve_grant_application)
        for topic_name, group, fields in BINDINGS:
            topic = Topic.objects.filter(name=topic_name, environment=cluster.environment).first()
            if topic is not None and not BindingApplication.objects.filter(topic=topic, group=group).exists():
                application = binding_actions.create_binding_application(
                    actor=cast.consumer_dev, topic=topic, app=consumer, group=group, **BINDING_DEFAULTS, **fields)
                _decide(application, cast, binding_actions.approve_binding_application)
    secrets_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(secrets_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(secrets, f, indent=1, sort_keys=True)
    return secrets
