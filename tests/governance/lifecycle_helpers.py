"""Shared set-up of the lifecycle tests: an approved topic with a binding and a producer grant, through the
actions (the workflow a person goes through), and the call that applies for a lifecycle change over REST."""

from __future__ import annotations

from types import SimpleNamespace

from apps.bindings import actions as binding_actions
from apps.topics import actions as topic_actions

BINDING = {"group": "shipping", "selector_kind": "exact", "selector_pattern": "paid", "mode": "clustering",
           "delivery_limit": 5, "ttl_s": 3600, "backoff_initial_ms": 500, "backoff_max_ms": 30000,
           "backoff_multiplier": 2.0, "max_in_flight": 16, "reason": "Ship paid orders"}


def bind(people, topic, app, **overrides):
    application = binding_actions.create_binding_application(actor=people.consumer, topic=topic, app=app,
                                                              **{**BINDING, **overrides})
    application = binding_actions.approve_binding_application(actor=people.lead, application=application)
    if topic.cluster.environment == "prod":
        application = binding_actions.approve_binding_application(actor=people.sre, application=application)
    return application.binding


def grant(people, topic, app):
    application = binding_actions.create_grant_application(actor=people.dev, topic=topic, app=app, reason="publish")
    application = binding_actions.approve_grant_application(actor=people.lead, application=application)
    if topic.cluster.environment == "prod":
        application = binding_actions.approve_grant_application(actor=people.sre, application=application)
    return application.grant


def make_estate(people, make_cluster, approved_topic, environment="dev", **overrides):
    """Topic payments.order-paid (created, paid) on cluster <environment>-a, consumer app shipping-worker bound
    as group shipping (exact: paid), producer app checkout granted."""
    cluster = make_cluster(f"{environment}-a", environment)
    topic = approved_topic(cluster, **overrides)
    consumer, _ = topic_actions.create_app(actor=people.consumer, app_id="shipping-worker",
                                           team=people.consumer.teams.get())
    producer, _ = topic_actions.create_app(actor=people.dev, app_id="checkout", team=people.dev.teams.get())
    return SimpleNamespace(cluster=cluster, topic=topic, consumer=consumer, producer=producer,
                           binding=bind(people, topic, consumer), grant=grant(people, topic, producer))


def apply(api, user, **body):
    """POST a lifecycle application; returns the response."""
    return api(user).post("/api/v1/lifecycle-applications/", {"reason": "Needed", **body}, format="json")
