"""The audit chain's lock against provisioning's row locks, with real PostgreSQL connections.

An approval and the read-back of the previous approval both lock the app's sync-state row and append to the
audit chain. Each test forces the interleaving that used to deadlock instead of hoping for it: the provisioning
side holds its rows and is held back from the chain lock until the approval has either taken the chain lock
(the old order) or is waiting in PostgreSQL for those rows (the fixed order). And a provisioning task that
does lose a deadlock is retried by the worker, not left half done.
"""

from __future__ import annotations

import threading
import time

import psycopg2
import pytest
from django.db import connection, transaction

from apps.audit.context import action_context
from apps.audit.models import AuditRecord
from apps.audit.recorder import CHAIN_LOCK_KEY, verify_chain
from apps.bindings import actions as bindings
from apps.bindings.models import BindingApplication
from apps.governance.workflow import State
from apps.provisioning import provision
from apps.topics import actions as topics
from apps.topics.models import TopicApplication
from devstack.waiting import wait_for
from tests.governance.conftest import read_node

pytestmark = pytest.mark.django_db(transaction=True)

BINDING = {"selector_kind": "wildcard", "selector_pattern": "pa*", "mode": "clustering", "delivery_limit": 5,
           "ttl_s": 3600, "backoff_initial_ms": 500, "backoff_max_ms": 30000, "backoff_multiplier": 2.0,
           "max_in_flight": 16, "reason": "Ship paid orders"}


def in_thread(name: str, func, errors: dict, wrapper, started: threading.Event | None = None,
              pid: dict | None = None) -> threading.Thread:
    """Run func on its own database connection with `wrapper` around every statement; keep what it raised."""
    def run():
        try:
            connection.ensure_connection()
            if pid is not None:
                pid[name] = connection.connection.info.backend_pid
            with connection.execute_wrapper(wrapper):
                func()
        except BaseException as exc:  # the test reports it
            errors[name] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def test_an_approval_racing_the_read_back_of_the_previous_one_does_not_deadlock(
        paused_worker, people, make_cluster, approved_topic, zk, zk_chroot):
    pause, resume = paused_worker
    pause()  # the approvals' pushes wait in Redis; this test runs the first one itself, in a thread
    cluster = make_cluster("dev-a", "dev")
    topic = approved_topic(cluster)
    consumer, _ = topics.create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    first = bindings.create_binding_application(actor=people.consumer, topic=topic, app=consumer, group="shipping",
                                                **BINDING)
    bindings.approve_binding_application(actor=people.lead, application=first)
    second = bindings.create_binding_application(actor=people.consumer, topic=topic, app=consumer, group="audit",
                                                 **BINDING)

    rows_held = threading.Event()  # the read-back holds the sync-state rows (the app's among them)
    go = threading.Event()  # the approval holds the chain lock, or waits in PostgreSQL for those rows
    errors: dict[str, BaseException] = {}
    pid: dict[str, int] = {}
    seen: list[str] = []  # what the approval did first while the read-back held its rows

    def read_back_side(execute, sql, params, many, context):
        if "pg_advisory_xact_lock" in sql and rows_held.is_set():
            go.wait(30)
        result = execute(sql, params, many, context)
        if "FOR UPDATE" in sql and "provisioning_syncstate" in sql:
            rows_held.set()
        return result

    def approval_side(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "pg_advisory_xact_lock" in sql and not go.is_set():
            seen.append("took the chain lock")
            go.set()
        return result

    def provision_first():
        with action_context("task"):
            provision.provision_application("binding", first.pk)

    def approve_second():
        with action_context("api"):
            bindings.approve_binding_application(actor=people.lead, application=second)

    read_back = in_thread("read-back", provision_first, errors, read_back_side)
    assert rows_held.wait(30), f"the read-back never locked its rows: {errors}"
    approval = in_thread("approval", approve_second, errors, approval_side, pid=pid)
    while approval.is_alive() and not go.is_set():
        with connection.cursor() as cur:  # autocommit: a fresh view of the other sessions each time
            cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid.get("approval", 0)])
            row = cur.fetchone()
        if row and row[0] == "Lock" and not go.is_set():
            seen.append("waited for the rows")
            go.set()
        time.sleep(0.02)
    go.set()
    read_back.join(60)
    approval.join(60)
    assert not read_back.is_alive() and not approval.is_alive()
    assert errors == {}
    assert seen == ["waited for the rows"]  # the chain lock comes last, after the rows

    assert BindingApplication.objects.get(pk=first.pk).state == State.ACTIVE
    assert BindingApplication.objects.get(pk=second.pk).state == State.APPROVED
    resume()  # the worker provisions the topic and the second binding
    for application in (TopicApplication.objects.get(topic=topic), first, second):
        wait_for(lambda a=application: type(a).objects.get(pk=a.pk).state == State.ACTIVE,
                 what=f"{application} to be active")
    root = f"{zk_chroot}/dev-a"
    assert read_node(zk, f"{root}/bindings/payments.order-paid/shipping")["revision"] == 1
    assert read_node(zk, f"{root}/bindings/payments.order-paid/audit")["revision"] == 1
    assert AuditRecord.objects.filter(action="binding_application.approve", object_id=str(second.pk)).count() == 1
    assert AuditRecord.objects.filter(action="binding.provisioned").count() == 2
    assert verify_chain().ok


def test_a_provisioning_attempt_that_loses_a_deadlock_is_retried(celery_worker, people, make_cluster, topic_fields,
                                                                  zk, zk_chroot):
    cluster = make_cluster("dev-a", "dev")
    application = topics.create_topic_application(actor=people.dev, **topic_fields(cluster))
    other = psycopg2.connect(**connection.get_connection_params())  # a session that takes the locks out of order
    try:
        with other.cursor() as cur:
            # the chain lock is ours before the worker sees the approval (on_commit hooks run in order)
            with transaction.atomic():
                transaction.on_commit(lambda: cur.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY]))
                topics.approve_topic_application(actor=people.lead, application=application)

            def worker_waits_for_the_chain():
                with connection.cursor() as mine:
                    mine.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                    return mine.fetchone()[0] == 1

            # the worker locked the application row to mark it provisioning, and waits for the chain lock
            wait_for(worker_waits_for_the_chain, what="the worker to wait for the audit chain lock")
            cur.execute("SET LOCAL deadlock_timeout = '60s'")  # the worker's session finds the deadlock
            cur.execute("SELECT id FROM topics_topicapplication WHERE id = %s FOR UPDATE", [application.pk])
            # granted while we still hold the chain lock: the worker's attempt was rolled back
            assert cur.fetchone() == (application.pk,)
        other.rollback()
    finally:
        other.close()

    wait_for(lambda: TopicApplication.objects.get(pk=application.pk).state == State.ACTIVE,
             what="the retried provisioning to make the application active")
    assert read_node(zk, f"{zk_chroot}/dev-a/topics/payments.order-paid")["revision"] == 1
    states = list(AuditRecord.objects.filter(action__startswith="topic_application.", object_id=str(application.pk))
                  .order_by("id").values_list("action", flat=True))
    assert states == ["topic_application.create", "topic_application.approve", "topic_application.provisioning",
                      "topic_application.active"]
    assert verify_chain().ok
