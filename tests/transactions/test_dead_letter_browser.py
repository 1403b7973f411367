"""The dead-letter browser and the group position reset, end to end: a real broker process, the real Celery
worker, Chromium. A developer of the owning team previews dead letters (pretty JSON, hex), re-drives exactly
the ones selected (a consumer counts what it gets, by id), deletes others (gone after a broker restart); the
whole selection by filter runs in Celery with progress; a copy lands on another topic of the team; resetting
the group's position skips its backlog (a consumer then gets only what was stored after the reset) and is
audited; a developer of another team is refused at web and REST; bad input changes nothing."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from apps.audit.models import AuditRecord
from apps.transactions.models import Redrive
from broker_core.client import Consumer, Message, Producer
from devstack.waiting import wait_for
from tests.broker.conftest import APP, cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.conftest import admin_token
from tests.support.browser import login
from tests.transactions.helpers import control_plane_cluster

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(cp, people):
    """The control plane's rows for what the broker cluster holds: topics orders and orders-retry (payments),
    shipments (logistics), the app, the binding orders → billing."""
    from apps.accounts.models import Team
    from apps.bindings.models import Binding
    from apps.topics.models import App, Topic

    payments, logistics = Team.objects.get(name="payments"), Team.objects.get(name="logistics")
    app = App.objects.create(app_id=APP, team=payments, secret_hash="-")
    topics = {}
    for name, team in (("orders", payments), ("orders-retry", payments), ("shipments", logistics)):
        topics[name] = Topic.objects.create(name=name, team=team, environment="dev", cluster=cp,
                                            message_types=["created", "paid"], expected_peak_mps=100,
                                            retention_hours=24, storage_level="file")
    binding = Binding.objects.create(topic=topics["orders"], app=app, group="billing", delivery_limit=1)
    return binding


@pytest.fixture
def stack(cluster, people, celery_worker, settings):  # noqa: F811
    """The broker cluster with orders → billing (delivery limit 1) and orders-retry → fixers, its control-plane
    rows, a broker, and a consumer of billing that refuses everything while `refusing` is set, then counts
    what it gets by id."""
    settings.SWITCHYARD_BROKER_ADMIN_TOKEN = admin_token()
    cluster.standard("orders")
    for name in ("orders-retry", "shipments"):
        cluster.pv.topic(name)
    cluster.pv.binding("orders", "billing", APP, delivery_limit=1, backoff_initial_ms=10, backoff_max_ms=10)
    cluster.pv.binding("orders-retry", "fixers", APP)
    cp = control_plane_cluster(people.admin, cluster)
    binding = _rows(cp, people)
    broker = cluster.broker(admin_token=admin_token())
    refusing = threading.Event()
    refusing.set()
    lock = threading.Lock()
    got: Counter = Counter()

    def handle(m):
        if refusing.is_set():
            raise RuntimeError("poison, for now")
        with lock:
            got[m.id] += 1

    def dead_letter(messages: list[Message]) -> list[str]:
        before = broker.group_stats("orders", "billing").get("dead_lettered", 0)
        with Producer(**cluster.client_kwargs()) as producer:
            ids = producer.send_many("orders", messages)
        wait_for(lambda: broker.group_stats("orders", "billing").get("dead_lettered") == before + len(ids), 60,
                 f"{len(ids)} more dead letters")
        return ids

    def counts() -> Counter:
        with lock:
            return Counter(got)

    consumer = Consumer("orders", "billing", handle, **cluster.client_kwargs())
    consumer.start()
    running = [consumer]

    def stop_consumer():
        while running:
            running.pop().stop()

    yield SimpleNamespace(cluster=cluster, cp=cp, binding=binding, broker=broker, refusing=refusing,
                          dead_letter=dead_letter, counts=counts, stop_consumer=stop_consumer)
    stop_consumer()
    connection.close()


def _listed(api, cp, **filters) -> dict:
    response = api.get("/api/v1/dead-letters/", {"cluster": cp.name, "topic": "orders", "group": "billing",
                                                 "limit": 500, **filters})
    assert response.status_code == 200, response.content
    return response.json()


def test_developer_previews_redrives_exactly_the_selected_and_deletes_durably(stack, people, page, live_server,
                                                                              api_for):
    order = {"order": 42, "items": [{"sku": "A-1", "qty": 2}]}
    ids = stack.dead_letter(
        [Message(json.dumps(order).encode(), message_type="paid", key="cust-7", business_id="order-42",
                 headers={"trace": "t-1"}),
         Message(b"\x00\x01\xfe binary", message_type="created", key="cust-8", business_id="order-43")]
        + [Message(b'{"n": %d}' % i, message_type="created", key=f"k-{i}") for i in range(6)])
    stack.refusing.clear()

    login(page, live_server.url, people.dev.username)  # a developer of payments, which owns the topic
    page.goto(f"{live_server.url}/bindings/{stack.binding.pk}/")
    page.get_by_test_id("binding-dead-letters").click()
    page.wait_for_url(f"**/dead-letters/{stack.binding.pk}/")
    assert page.get_by_test_id("dlq-total").inner_text() == "8"
    json_preview = page.locator(f'[data-testid=dlq-preview][data-message-id="{ids[0]}"]')
    json_preview.locator("summary").click()
    body = json_preview.get_by_test_id("dlq-body")
    assert body.get_attribute("data-kind") == "json"
    assert json.loads(body.inner_text()) == order and "\n  " in body.inner_text()  # pretty, indented
    assert json_preview.get_by_test_id("dlq-header").inner_text() == "t-1"
    binary = page.locator(f'[data-testid=dlq-preview][data-message-id="{ids[1]}"]')
    binary.locator("summary").click()
    assert binary.get_by_test_id("dlq-body").get_attribute("data-kind") == "hex"
    assert binary.get_by_test_id("dlq-body").inner_text() == b"\x00\x01\xfe binary".hex(" ")

    page.get_by_test_id("dlq-redrive").click()  # nothing ticked: refused with the reason, nothing queued
    assert "Select at least one dead letter" in page.get_by_test_id("dlq-action-errors").inner_text()
    assert not Redrive.objects.exists()
    chosen = [ids[2], ids[5]]
    for message_id in chosen:
        page.locator(f'[data-testid=dlq-select][value="{message_id}"]').check()
    page.get_by_test_id("dlq-redrive").click()
    page.wait_for_url("**/redrives/*/")
    wait_for(lambda: page.get_by_test_id("redrive-state").inner_text() == "succeeded", 30, interval=0.5,
             what="the run's page to show succeeded (it refreshes itself)")
    assert page.get_by_test_id("redrive-done").inner_text() == "2"
    wait_for(lambda: sum(stack.counts().values()) >= 2, 30, "the re-driven messages delivered")
    time.sleep(1)  # anything else re-driven by mistake would arrive meanwhile
    assert stack.counts() == Counter({ids[2]: 1, ids[5]: 1}), "exactly the selected ones, once each"

    # filter by key, then delete the one shown (confirmed in the dialog)
    page.goto(f"{live_server.url}/dead-letters/{stack.binding.pk}/?key=cust-8")
    assert page.get_by_test_id("dlq-total").inner_text() == "1"
    page.get_by_test_id("dlq-select").check()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("dlq-delete").click()
    page.wait_for_url("**/redrives/*/")
    wait_for(lambda: page.get_by_test_id("redrive-state").inner_text() == "succeeded", 30, interval=0.5,
             what="the delete run to succeed")
    api = api_for(people.dev)
    left = {ids[0], ids[3], ids[4], ids[6], ids[7]}
    assert {d["message_id"] for d in _listed(api, stack.cp)["dead_letters"]} == left
    stack.broker.restart()  # SIGKILL and start again: the delete stays
    assert {d["message_id"] for d in _listed(api, stack.cp)["dead_letters"]} == left
    deleted = AuditRecord.objects.get(action="dlq.delete_request")
    assert (deleted.actor_name, deleted.after["message_ids"]) == (people.dev.username, 1)
    assert AuditRecord.objects.get(action="dlq.redrive_request").actor_name == people.dev.username
    assert Redrive.objects.get(operation="delete").done == 1

    # all that match a filter, through the page: the 4 "created" ones left, not the "paid" one
    page.goto(f"{live_server.url}/dead-letters/{stack.binding.pk}/?message_type=created")
    assert page.get_by_test_id("dlq-total").inner_text() == "4"
    page.get_by_test_id("scope-all").check()
    page.get_by_test_id("dlq-redrive").click()
    page.wait_for_url("**/redrives/*/")
    wait_for(lambda: page.get_by_test_id("redrive-state").inner_text() == "succeeded", 30, interval=0.5,
             what="the run over all matching to succeed")
    assert page.get_by_test_id("redrive-done").inner_text() == "4"
    wait_for(lambda: sum(stack.counts().values()) >= 6, 30, "the matching ones delivered")
    time.sleep(1)
    assert stack.counts() == Counter({i: 1 for i in (ids[2], ids[5], ids[3], ids[4], ids[6], ids[7])})
    assert {d["message_id"] for d in _listed(api, stack.cp)["dead_letters"]} == {ids[0]}


def test_all_matching_runs_in_celery_and_copy_goes_to_a_team_topic(stack, people, api_for):
    paid = stack.dead_letter([Message(b"p%d" % i, message_type="paid") for i in range(1200)])
    created = stack.dead_letter([Message(b"c%d" % i, message_type="created") for i in range(30)])
    stack.refusing.clear()
    api = api_for(people.sre)
    assert _listed(api, stack.cp, message_type="paid", limit=1)["total"] == 1200
    pages, after = [], None  # cursor paging: every dead letter once, in the brokers' order
    while True:
        page = _listed(api, stack.cp, limit=500, **({"after": after} if after else {}))
        pages.append([d["message_id"] for d in page["dead_letters"]])
        after = page["next_after"]
        if not after:
            break
    assert [len(p) for p in pages] == [500, 500, 230]
    assert sorted(sum(pages, [])) == sorted(paid + created)

    response = api.post("/api/v1/dead-letters/redrive/", {"cluster": stack.cp.name, "topic": "orders",
                                                          "group": "billing", "all_matching": True,
                                                          "message_type": "paid"}, format="json")
    assert response.status_code == 202, response.content
    run_id = response.json()["id"]
    seen = []

    def ended():
        body = api.get(f"/api/v1/redrives/{run_id}/").json()
        seen.append(body["done"])
        return body if body["state"] in ("succeeded", "failed") else None

    body = wait_for(ended, 120, "the run over all matching", interval=0.02)
    assert (body["state"], body["done"], body["filters"]) == ("succeeded", 1200, {"message_type": "paid"})
    assert any(0 < d < 1200 for d in seen), f"no progress seen between start and end: {sorted(set(seen))}"
    wait_for(lambda: sum(stack.counts().values()) >= 1200, 60, "the paid ones delivered")
    time.sleep(1)
    assert set(stack.counts()) == set(paid) and set(stack.counts().values()) == {1}

    fixed = Counter()
    with Consumer("orders-retry", "fixers", lambda m: fixed.update([m.id]), **stack.cluster.client_kwargs()):
        response = api.post("/api/v1/dead-letters/copy/", {
            "cluster": stack.cp.name, "topic": "orders", "group": "billing", "message_ids": created[:3],
            "to_topic": "orders-retry"}, format="json")
        assert response.status_code == 200, response.content
        assert sorted(response.json()["copied"]) == sorted(created[:3])
        wait_for(lambda: set(fixed) == set(created[:3]), 30, "the copies delivered on orders-retry")
    refused = api.post("/api/v1/dead-letters/copy/", {
        "cluster": stack.cp.name, "topic": "orders", "group": "billing", "message_ids": created[3:4],
        "to_topic": "shipments"}, format="json")  # logistics' topic
    assert refused.status_code == 400 and "to_topic" in refused.json(), refused.content
    assert AuditRecord.objects.filter(action="dlq.copy").count() == 1
    assert _listed(api, stack.cp)["total"] == 30, "copies leave the dead letters where they are"


def test_reset_position_skips_the_backlog_and_is_audited(stack, people, page, live_server):
    stack.stop_consumer()  # no consumer: the group's backlog builds up
    with Producer(**stack.cluster.client_kwargs()) as producer:
        old = producer.send_many("orders", [Message(b"old %d" % i, message_type="paid") for i in range(40)])
        wait_for(lambda: stack.broker.group_stats("orders", "billing").get("depth") == 40, 30, "the backlog")
        time.sleep(0.3)
        reset_at = timezone.now()
        time.sleep(0.3)
        new = producer.send_many("orders", [Message(b"new %d" % i, message_type="paid") for i in range(5)])
    wait_for(lambda: stack.broker.group_stats("orders", "billing").get("depth") == 45, 30, "the whole backlog")

    login(page, live_server.url, people.dev.username)  # from the cluster page to the group, then its reset
    page.goto(f"{live_server.url}{reverse('clusters:detail', args=[stack.cp.name])}")
    page.get_by_test_id("cluster-dead-letters").click()
    page.get_by_test_id("dlq-group-orders-billing").get_by_role("link", name="billing").click()
    page.wait_for_url(f"**/dead-letters/{stack.binding.pk}/")
    page.get_by_test_id("reset-position").click()
    page.fill("#id_to", (timezone.now() + timezone.timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S"))
    page.check("#id_confirm")
    page.get_by_test_id("reset-submit").click()  # in the future: refused, nothing changes
    assert "time in the past" in page.get_by_test_id("error-to").inner_text()
    assert stack.broker.group_stats("orders", "billing")["depth"] == 45
    page.fill("#id_to", reset_at.strftime("%Y-%m-%d %H:%M:%S.%f"))
    page.uncheck("#id_confirm")
    page.get_by_test_id("reset-submit").click()  # not confirmed: refused, nothing changes
    assert "Tick the box" in page.get_by_test_id("error-confirm").inner_text()
    assert stack.broker.group_stats("orders", "billing")["depth"] == 45
    assert not AuditRecord.objects.filter(action="binding.reset_position").exists()
    page.check("#id_confirm")
    page.get_by_test_id("reset-submit").click()
    page.wait_for_url(f"**/bindings/{stack.binding.pk}/")
    assert "40 messages stored before" in page.locator("body").inner_text()

    record = AuditRecord.objects.get(action="binding.reset_position")
    assert (record.after["skipped"], record.after["group"]) == (40, "billing")
    got = Counter()
    with Consumer("orders", "billing", lambda m: got.update([m.id]), **stack.cluster.client_kwargs()):
        wait_for(lambda: len(got) >= 5, 30, "the messages stored after the reset")
        time.sleep(1)
    assert set(got) == set(new) and not set(got) & set(old)


def test_other_team_is_refused_and_bad_input_changes_nothing(stack, people, page, live_server, api_for):
    ids = stack.dead_letter([Message(b"x", message_type="paid") for _ in range(3)])
    base = {"cluster": stack.cp.name, "topic": "orders", "group": "billing"}
    outsider = api_for(people.consumer)  # a developer of logistics
    assert outsider.get("/api/v1/dead-letters/", base).status_code == 403
    for path, body in (("redrive", {"message_ids": ids}), ("delete", {"message_ids": ids}),
                       ("copy", {"message_ids": ids, "to_topic": "orders-retry"}), ("reset", {})):
        response = outsider.post(f"/api/v1/dead-letters/{path}/", {**base, **body}, format="json")
        assert response.status_code == 403, (path, response.content)
    login(page, live_server.url, people.consumer.username)
    page.goto(f"{live_server.url}/dead-letters/?cluster={stack.cp.name}")
    assert page.get_by_test_id("dlq-group-orders-billing").count() == 0  # not listed to another team
    for url in (f"/dead-letters/{stack.binding.pk}/", f"/dead-letters/{stack.binding.pk}/reset-position/"):
        assert page.goto(f"{live_server.url}{url}").status == 403

    page.context.clear_cookies()
    login(page, live_server.url, people.auditor.username)  # reads every topic's dead letters, changes nothing
    page.goto(f"{live_server.url}/dead-letters/{stack.binding.pk}/")
    assert page.get_by_test_id("dlq-row").count() == 3
    assert page.get_by_test_id("dlq-select").count() == 0 and page.get_by_test_id("reset-position").count() == 0
    assert page.goto(f"{live_server.url}/dead-letters/{stack.binding.pk}/reset-position/").status == 403

    auditor = api_for(people.auditor)
    assert auditor.get("/api/v1/dead-letters/", base).json()["total"] == 3
    assert auditor.post("/api/v1/dead-letters/delete/", {**base, "message_ids": ids}, format="json").status_code \
        == 403

    dev = api_for(people.dev)
    future = (timezone.now() + timezone.timedelta(hours=1)).isoformat()
    for path, body, field in (("reset", {**base, "group": "nobody"}, "group"),
                              ("reset", {**base, "to": future}, "to"),
                              ("redrive", {**base, "message_ids": []}, "message_ids"),
                              ("delete", {**base, "message_ids": []}, "message_ids"),
                              ("copy", {**base, "message_ids": [], "to_topic": "orders-retry"}, "message_ids")):
        response = dev.post(f"/api/v1/dead-letters/{path}/", body, format="json")
        assert response.status_code == 400 and field in response.json(), (path, response.content)
    assert Redrive.objects.count() == 0
    assert not AuditRecord.objects.filter(action__in=["dlq.redrive_request", "dlq.delete_request", "dlq.copy",
                                                      "binding.reset_position"]).exists()
    assert _listed(dev, stack.cp)["total"] == 3
