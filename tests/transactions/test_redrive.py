"""Dead-letter re-drive through a real broker and the real Celery worker: 5,000 dead letters, progress seen
rising over REST, each delivered once more, a second run re-drives nothing; by time range over REST and the
CLI (only the dead letters inside the window; the CLI's progress rising batch by batch); a run left running
by a dead worker is resumed and finishes without re-driving anything twice."""

import threading
import time
from collections import Counter
from datetime import timedelta
from io import StringIO
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from apps.audit.models import AuditRecord
from apps.transactions.broker_admin import BrokerAdmin, live_brokers
from apps.transactions.models import Redrive, RedrivenMessage
from broker_core.client import Consumer, Message, Producer
from devstack.waiting import wait_for
from tests.broker.conftest import APP, cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.conftest import admin_token
from tests.transactions.helpers import control_plane_cluster

pytestmark = pytest.mark.django_db(transaction=True)
COUNT = 5000


@pytest.fixture
def poisoned(cluster, people, celery_worker, settings):  # noqa: F811
    """Topic `orders`, group `billing` (delivery limit 1) with a consumer that refuses everything until
    `refusing` is cleared, then counts what it gets; `dead_letter(n)` publishes n messages and waits until
    all n are dead letters."""
    settings.SWITCHYARD_BROKER_ADMIN_TOKEN = admin_token()
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, delivery_limit=1)
    cp = control_plane_cluster(people.admin, cluster)
    broker = cluster.broker(admin_token=admin_token())
    refusing = threading.Event()
    refusing.set()
    lock = threading.Lock()
    redelivered: Counter = Counter()

    def handle(m):
        if refusing.is_set():
            raise RuntimeError("poison, for now")
        with lock:
            redelivered[m.id] += 1

    def dead_letter(n: int) -> list[str]:
        before = broker.group_stats("orders", "billing").get("dead_lettered", 0)
        with Producer(**cluster.client_kwargs()) as producer:
            ids = producer.send_many("orders", [Message(b"x%d" % i, message_type="paid") for i in range(n)])
        wait_for(lambda: broker.group_stats("orders", "billing").get("dead_lettered") == before + n, 90,
                 f"{n:,} more dead letters")
        return ids

    def counts() -> Counter:
        with lock:
            return Counter(redelivered)

    consumer = Consumer("orders", "billing", handle, **cluster.client_kwargs())
    consumer.start()
    yield SimpleNamespace(cluster=cluster, cp=cp, broker=broker, refusing=refusing, dead_letter=dead_letter,
                          counts=counts)
    consumer.stop()
    connection.close()


def test_redrive_5000_dead_letters_once_with_progress(poisoned, people, api_for):
    cp = poisoned.cp
    ids = poisoned.dead_letter(COUNT)
    poisoned.refusing.clear()

    api = api_for(people.sre)
    response = api.post("/api/v1/redrives/", {"cluster": cp.name, "topic": "orders", "group": "billing"},
                        format="json")
    assert response.status_code == 202, response.content
    run_id = response.json()["id"]
    seen = []

    def ended():
        body = api.get(f"/api/v1/redrives/{run_id}/").json()
        if not seen or seen[-1] != body["done"]:
            seen.append(body["done"])
        return body if body["state"] in ("succeeded", "failed") else None

    body = wait_for(ended, 120, f"re-drive #{run_id} to end", interval=0.02)
    assert body["state"] == "succeeded", body
    assert (body["total"], body["done"], body["skipped"]) == (COUNT, COUNT, 0)
    assert body["batches"] == COUNT // 500  # the worker's SWITCHYARD_REDRIVE_BATCH
    assert len([d for d in seen if 0 < d < COUNT]) >= 2, f"progress not seen rising: {seen}"
    assert seen == sorted(seen)
    wait_for(lambda: sum(poisoned.counts().values()) >= COUNT, 90, "every re-driven message delivered")

    # a second run finds nothing left to re-drive
    again = api.post("/api/v1/redrives/", {"cluster": cp.name, "topic": "orders", "group": "billing"},
                     format="json").json()
    wait_for(lambda: Redrive.objects.get(pk=again["id"]).state == "succeeded", 60, "the second run")
    second = Redrive.objects.get(pk=again["id"])
    assert (second.done, second.skipped) == (0, 0)

    # by ids through the CLI: already re-driven ones are skipped, never sent
    out = StringIO()
    call_command("redrive", cluster=cp.name, topic="orders", group="billing", ids=",".join(ids[:3]),
                 wait=True, interval=0.1, stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("re-drive #") and "queued" in lines[0]
    assert lines[-1].endswith("succeeded: 0 re-driven, 3 skipped of 3 selected, 1 batches"), lines
    time.sleep(2)
    redelivered = poisoned.counts()
    assert set(redelivered) == set(ids)
    assert set(redelivered.values()) == {1}, "a dead letter was delivered more than once"
    assert RedrivenMessage.objects.filter(cluster=cp).count() == COUNT
    assert AuditRecord.objects.filter(action="dlq.redrive_request").count() == 3
    done = AuditRecord.objects.filter(action="dlq.redrive_done").order_by("id").first()
    assert (done.source, done.after["done"]) == ("task", COUNT)


def _moment():
    """A boundary strictly between two groups of dead letters (the broker stamps them in ms)."""
    time.sleep(0.05)
    at = timezone.now()
    time.sleep(0.05)
    return at


def test_redrive_by_time_range_takes_only_the_window_over_rest_and_the_cli(poisoned, people, api_for):
    cp = poisoned.cp
    before = poisoned.dead_letter(200)
    t1 = _moment()
    inside = poisoned.dead_letter(300)
    t2 = _moment()
    later = poisoned.dead_letter(1600)
    poisoned.refusing.clear()

    # REST: a closed window [t1, t2)
    api = api_for(people.sre)
    response = api.post("/api/v1/redrives/", {"cluster": cp.name, "topic": "orders", "group": "billing",
                                              "since": t1.isoformat(), "until": t2.isoformat()}, format="json")
    assert response.status_code == 202, response.content
    run_id = response.json()["id"]
    wait_for(lambda: api.get(f"/api/v1/redrives/{run_id}/").json()["state"] == "succeeded", 60, "the REST run")
    body = api.get(f"/api/v1/redrives/{run_id}/").json()
    assert (body["total"], body["done"], body["skipped"], body["batches"]) == (300, 300, 0, 1)
    wait_for(lambda: sum(poisoned.counts().values()) >= 300, 30, "the window's dead letters delivered")
    time.sleep(1)
    assert set(poisoned.counts()) == set(inside)

    # CLI: from t2 on (open end), in 4 batches of 500 at most, progress printed as it rises
    out = StringIO()
    call_command("redrive", cluster=cp.name, topic="orders", group="billing", since=t2.isoformat(), wait=True,
                 interval=0.02, stdout=out)
    lines = out.getvalue().splitlines()
    assert "queued" in lines[0]
    assert lines[-1].endswith("succeeded: 1600 re-driven, 0 skipped of 1600 selected, 4 batches"), lines
    progress = [int(line.split(": ")[1].split(" re-driven")[0]) for line in lines[1:]]
    assert progress == sorted(progress) and progress[-1] == 1600, lines
    assert any(0 < done < 1600 for done in progress), f"no progress line between start and end: {lines}"

    wait_for(lambda: sum(poisoned.counts().values()) >= 1900, 60, "the CLI window's dead letters delivered")
    time.sleep(1)
    redelivered = poisoned.counts()
    assert set(redelivered) == set(inside) | set(later) and set(redelivered.values()) == {1}
    # the dead letters before t1 were never re-driven: still listed by the broker, never delivered again
    [endpoint] = live_brokers(cp)
    with BrokerAdmin(endpoint) as admin:
        left = admin.dead_letters(topic="orders", group="billing", limit=1000)["dead_letters"]
    assert sorted(d["message_id"] for d in left) == sorted(before)
    assert not set(before) & set(redelivered)
    assert RedrivenMessage.objects.filter(cluster=cp).count() == 1900


def test_run_left_running_by_a_dead_worker_is_resumed_and_redrives_each_letter_once(poisoned, people):
    """What a worker killed mid-run leaves: the run `running`, its heartbeat minutes old, one batch re-driven
    and counted, part of the next re-driven and recorded but not counted. The periodic resume picks it up."""
    from apps.transactions.tasks import resume_stalled_redrives, run_redrive

    count, cp = 1200, poisoned.cp
    ids = poisoned.dead_letter(count)
    poisoned.refusing.clear()

    long_ago = timezone.now() - timedelta(minutes=10)
    run = Redrive.objects.create(cluster=cp, topic="orders", group="billing", state="running",
                                 started_at=long_ago, heartbeat_at=long_ago, requested_by=people.sre)
    fresh = Redrive.objects.create(cluster=cp, topic="orders", group="other", state="running",
                                   started_at=timezone.now(), heartbeat_at=timezone.now())
    # the dead worker's work: 500 re-driven and counted, then 100 re-driven and recorded before it died
    [endpoint] = live_brokers(cp)
    with BrokerAdmin(endpoint) as admin:
        listed = [d["message_id"] for d in admin.dead_letters(topic="orders", group="billing", limit=600)
                  ["dead_letters"]]
        assert len(listed) == 600
        for part in (listed[:500], listed[500:]):
            assert sorted(admin.redrive(topic="orders", group="billing", message_ids=part)["redriven"]) == \
                sorted(part)
    RedrivenMessage.objects.bulk_create([RedrivenMessage(cluster=cp, topic="orders", group="billing",
                                                         message_id=i, redrive=run) for i in listed])
    Redrive.objects.filter(pk=run.pk).update(total=500, done=500, batches=1)

    # a task for a run whose worker is alive leaves it alone
    assert run_redrive.delay(fresh.pk).get(timeout=30) == "running"
    assert resume_stalled_redrives.delay().get(timeout=30) == [run.pk]
    wait_for(lambda: Redrive.objects.get(pk=run.pk).state == "succeeded", 60, "the resumed run to finish")
    run.refresh_from_db()
    assert (run.total, run.done, run.skipped, run.batches) == (count, count, 0, 1 + 2)
    assert resume_stalled_redrives.delay().get(timeout=30) == []
    fresh.refresh_from_db()
    assert (fresh.state, fresh.batches) == ("running", 0)

    wait_for(lambda: sum(poisoned.counts().values()) >= count, 60, "every dead letter delivered")
    time.sleep(2)
    redelivered = poisoned.counts()
    assert set(redelivered) == set(ids)
    assert set(redelivered.values()) == {1}, "a dead letter was re-driven twice"
    with BrokerAdmin(endpoint) as admin:
        assert admin.dead_letters(topic="orders", group="billing")["dead_letters"] == []
    assert RedrivenMessage.objects.filter(redrive=run).count() == count
    assert AuditRecord.objects.get(action="dlq.redrive_done").after["done"] == count
