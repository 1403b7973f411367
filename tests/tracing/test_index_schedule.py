"""The scheduled index build: created by migrating, read without writing, changed by an SRE and seen by
Celery beat's DatabaseScheduler, and run by the real Celery worker over real Spark."""

import importlib
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import psycopg2
import pytest
from django.apps import apps
from django.core import serializers
from django.db import connection
from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks
from django_celery_beat.schedulers import DatabaseScheduler

from apps.audit.models import AuditRecord
from apps.tracing.models import IndexRun, TracedMessage
from apps.tracing.tasks import scheduled_trace_index_build
from control_plane.celery import app
from tests.tracing.conftest import TraceBatch

pytestmark = pytest.mark.django_db(transaction=True)

TASK_NAME, TASK = "trace-index-build", "apps.tracing.tasks.scheduled_trace_index_build"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def migrated_schedule():
    """The schedule as the data migration leaves it (transactional tests empty the tables it filled)."""
    importlib.import_module("apps.tracing.migrations.0002_index_schedule").create(apps, None)


def beat_rows() -> str:
    return serializers.serialize("json", [*PeriodicTask.objects.order_by("pk"), *IntervalSchedule.objects.order_by("pk"),
                                          *PeriodicTasks.objects.all()])


def test_a_fresh_migrate_schedules_the_build():
    db = connection.settings_dict
    fresh = f"{db['NAME']}_fresh"
    with connection.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{fresh}"')
        cur.execute(f'CREATE DATABASE "{fresh}"')
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, check=True, timeout=300,
                       env={**os.environ, "SWITCHYARD_DB_NAME": fresh})
        with psycopg2.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"],
                              dbname=fresh) as conn, conn.cursor() as cur:
            cur.execute("SELECT t.task, t.enabled, i.every, i.period FROM django_celery_beat_periodictask t "
                        "JOIN django_celery_beat_intervalschedule i ON i.id = t.interval_id WHERE t.name = %s",
                        [TASK_NAME])
            assert cur.fetchall() == [(TASK, True, 10, "minutes")]
        conn.close()
    finally:
        with connection.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{fresh}"')


def test_reading_the_schedule_writes_nothing(migrated_schedule, make_user, api_for, client):
    assert scheduled_trace_index_build.name == TASK
    auditor = make_user("aud-sched", "auditor")
    before = beat_rows()
    assert api_for(auditor).get("/api/v1/traces/schedule/").json() == {"every_minutes": 10, "enabled": True}
    client.force_login(auditor)
    assert b"Every 10 minutes" in client.get("/tracing/index/").content
    assert beat_rows() == before

    # with the task gone (deleted in the admin), reading says nothing is scheduled and still creates nothing
    PeriodicTask.objects.get(name=TASK_NAME).delete()
    before = beat_rows()
    assert api_for(auditor).get("/api/v1/traces/schedule/").json() == {"every_minutes": None, "enabled": False}
    assert client.get("/tracing/index/").status_code == 200
    assert beat_rows() == before
    assert not PeriodicTask.objects.filter(name=TASK_NAME).exists() and AuditRecord.objects.count() == 0

    # an SRE's change is what creates it again
    sre = api_for(make_user("sre-sched", "sre"))
    assert sre.put("/api/v1/traces/schedule/", {"every_minutes": 5, "enabled": True}, format="json").status_code == 200
    task = PeriodicTask.objects.get(name=TASK_NAME)
    assert (task.task, task.interval.every, task.interval.period, task.enabled) == (TASK, 5, "minutes", True)
    record = AuditRecord.objects.get(action="trace_index.schedule")
    assert (record.before, record.after) == ({"every_minutes": None, "enabled": False},
                                             {"every_minutes": 5, "enabled": True})


def test_an_sre_schedule_change_through_rest_is_what_beat_sees(migrated_schedule, make_user, api_for):
    beat = DatabaseScheduler(app=app)  # reads the schedule from the database, as `celery beat` does
    entry = beat.schedule[TASK_NAME]
    assert (entry.task, entry.schedule.run_every) == (TASK, timedelta(minutes=10))
    beat.schedule_changed()  # beat's first tick: it notes the change counter it will compare against

    sre, developer = api_for(make_user("sre-sched", "sre")), api_for(make_user("dev-sched", "developer"))
    body = {"every_minutes": 3, "enabled": True}
    assert developer.put("/api/v1/traces/schedule/", body, format="json").status_code == 403
    bad = sre.put("/api/v1/traces/schedule/", {"every_minutes": 0, "enabled": True}, format="json")
    assert bad.status_code == 400 and "every_minutes" in bad.json()
    assert beat.schedule[TASK_NAME].schedule.run_every == timedelta(minutes=10)

    assert sre.put("/api/v1/traces/schedule/", body, format="json").json() == body
    assert beat.schedule[TASK_NAME].schedule.run_every == timedelta(minutes=3)
    assert sre.put("/api/v1/traces/schedule/", {**body, "enabled": False}, format="json").status_code == 200
    assert TASK_NAME not in beat.schedule
    assert [(r.actor_name, r.before, r.after) for r in AuditRecord.objects.filter(action="trace_index.schedule")
            .order_by("pk")] == [
        ("sre-sched", {"every_minutes": 10, "enabled": True}, {"every_minutes": 3, "enabled": True}),
        ("sre-sched", {"every_minutes": 3, "enabled": True}, {"every_minutes": 3, "enabled": False})]


def test_the_scheduled_build_runs_on_the_worker_and_skips_while_another_run_is_active(celery_worker, trace_dirs):
    batch = TraceBatch(trace_dirs["inputs"] / "node-sched" / "trace", node="node-sched")
    batch.emit("published", "sched-ack", 0, business_id="sched-1")
    batch.emit("stored", "sched-ack", 1)
    batch.emit("delivered", "sched-ack", 5, group="billing", consumer="c1", attempt=1)
    batch.emit("acked", "sched-ack", 6, group="billing", consumer="c1", attempt=1)
    batch.emit("published", "sched-dlq", 10, business_id="sched-2")
    batch.emit("stored", "sched-dlq", 11)
    batch.emit("delivered", "sched-dlq", 15, group="billing", consumer="c1", attempt=1)
    batch.emit("nacked", "sched-dlq", 16, group="billing", consumer="c1", attempt=1)
    batch.emit("dead_lettered", "sched-dlq", 16, group="billing", attempt=1, detail="delivery limit of 1 reached")
    batch.close()

    assert scheduled_trace_index_build.delay().get(timeout=300) == "succeeded"
    run = IndexRun.objects.get()
    assert (run.trigger, run.requested_by, run.state, run.new_files, run.new_events, run.messages) == (
        "schedule", None, "succeeded", 1, 9, 2)
    assert dict(TracedMessage.objects.values_list("message_id", "final_state")) == {
        "sched-ack": "acked", "sched-dlq": "dead_lettered"}

    # a tick while a build is under way queues nothing and reads nothing
    busy = IndexRun.objects.create(trigger="manual", state="running")
    later = TraceBatch(trace_dirs["inputs"] / "node-sched" / "trace", node="node-sched")
    later.emit("published", "sched-late", 20, business_id="sched-3")
    later.close()
    assert scheduled_trace_index_build.delay().get(timeout=60) == "skipped"
    assert IndexRun.objects.count() == 2
    assert not TracedMessage.objects.filter(message_id="sched-late").exists()

    # once it is over, the next tick indexes what came meanwhile
    IndexRun.objects.filter(pk=busy.pk).update(state="failed")
    assert scheduled_trace_index_build.delay().get(timeout=300) == "succeeded"
    newest = IndexRun.objects.first()
    assert (newest.trigger, newest.new_files, newest.messages) == ("schedule", 1, 1)
    assert TracedMessage.objects.get(message_id="sched-late").final_state == "published"


def test_rebuild_now_shows_its_progress_rising_while_it_runs(celery_worker, trace_dirs, make_user, api_for):
    batch = TraceBatch(trace_dirs["inputs"] / "node-progress" / "trace", node="node-progress")
    for n in range(20):
        batch.emit("published", f"progress-{n}", n, business_id=f"progress-{n}")
        batch.emit("stored", f"progress-{n}", n + 0.5)
    batch.close()

    sre = api_for(make_user("sre-progress", "sre"))
    started = sre.post("/api/v1/traces/index-runs/")
    assert started.status_code == 202 and started.json()["state"] == "queued"
    url = f"/api/v1/traces/index-runs/{started.json()['id']}/"
    seen = []  # each (state, percent, stage) the SRE's page would have shown, in order
    deadline = time.monotonic() + 300
    while not seen or seen[-1][0] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, seen
        body = sre.get(url).json()
        now = (body["state"], body["percent"], body["stage"])
        if not seen or seen[-1] != now:
            seen.append(now)
        time.sleep(0.05)

    assert seen[-1][:2] == ("succeeded", 100), seen
    running = [percent for state, percent, _ in seen if state == "running"]
    assert len(set(running)) >= 3 and all(0 < p < 100 for p in running), seen
    assert running == sorted(running), seen
    # what was seen is what the job reported, step by step (1: before Spark started; 100 shows when it is over)
    reported = [step["percent"] for step in IndexRun.objects.get(pk=started.json()["id"]).steps]
    assert reported == sorted(reported) and set(running) - {1} <= {min(p, 99) for p in reported}, (seen, reported)
    assert TracedMessage.objects.filter(message_id__startswith="progress-").count() == 20
