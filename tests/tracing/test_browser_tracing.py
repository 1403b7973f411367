"""Real browser, real Celery worker, real Spark: an SRE rebuilds the index and watches it; an auditor traces messages."""

import csv
import io

import pytest
from django.http import HttpRequest

from apps.audit.models import AuditRecord
from apps.tracing.models import IndexRun, TracedMessage
from tests.support.browser import login
from tests.tracing.conftest import TraceBatch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("request_threads_close_their_connections")]


def test_rebuild_now_then_the_auditor_traces_a_message(live_server, page, make_user, celery_worker, trace_dirs):
    batch = TraceBatch(trace_dirs["inputs"] / "node-1" / "trace")
    batch.emit("published", "m-retry", 0, app_id="shop", business_id="order-42", key="cust-9",
               client_host="10.0.0.5:4100", size=12)
    batch.emit("stored", "m-retry", 1)
    for attempt, (start, outcome) in enumerate([(10, "nacked"), (20, "nacked"), (30, "acked")], start=1):
        batch.emit("delivered", "m-retry", start, group="billing", consumer="c1", attempt=attempt)
        batch.emit(outcome, "m-retry", start + 2, group="billing", consumer="c1", attempt=attempt)
    batch.emit("delivered", "m-retry", 11, group="audit", consumer="c7", attempt=1)
    batch.emit("timed_out", "m-retry", 25, group="audit", consumer="c7", attempt=1)
    batch.emit("dead_lettered", "m-retry", 26, group="audit", attempt=1, detail="delivery limit 1")
    batch.emit("published", "m-other", 40, business_id="order-43")
    batch.close()

    make_user("sre-web", "sre")
    login(page, live_server.url, "sre-web")
    page.goto(f"{live_server.url}/tracing/index/")
    page.click("[data-testid=rebuild-now]")
    page.wait_for_url(f"{live_server.url}/tracing/index/runs/*/")
    # the page refreshes itself while the run is queued or running, then shows the result
    page.wait_for_selector("[data-testid=run-state]:text('succeeded')", timeout=240_000)
    assert page.locator("[data-testid=run-files]").inner_text() == "1"
    assert page.locator("[data-testid=run-events]").inner_text() == "12"
    assert page.locator("[data-testid=run-messages]").inner_text() == "2"
    run = IndexRun.objects.get()
    assert (run.trigger, run.requested_by.username, run.state) == ("manual", "sre-web", "succeeded")
    assert [s["stage"] for s in run.steps][-1] == "committed"
    assert AuditRecord.objects.filter(action="trace_index.build", actor_name="sre-web").count() == 1

    page.context.clear_cookies()
    make_user("aud-web", "auditor")
    login(page, live_server.url, "aud-web")
    page.click("[data-testid=nav-tracing]")
    page.fill("#id_business_id", "order-42")
    page.click("[data-testid=trace-search] button[type=submit]")
    assert page.locator("[data-testid=trace-results] tbody tr").count() == 1
    page.click("[data-testid=trace-results] a")
    page.wait_for_url(f"{live_server.url}/tracing/messages/m-retry/")
    assert page.locator("[data-testid=final-state]").inner_text() == "dead_lettered"

    svg = page.locator("[data-testid=timeline]")
    assert [svg.locator("g[data-lane]").nth(i).get_attribute("data-lane") for i in range(3)] == [
        "producer", "audit", "billing"]
    billing = svg.locator("g[data-lane=billing]")
    assert billing.get_attribute("data-end") == "acked"
    assert [billing.locator("rect").nth(i).get_attribute("data-outcome") for i in range(3)] == [
        "nacked", "nacked", "acked"]
    audit = svg.locator("g[data-lane=audit]")
    assert audit.get_attribute("data-end") == "dead_lettered"
    assert audit.locator("rect").get_attribute("data-outcome") == "timed_out"
    assert audit.locator("circle[data-event=dead_lettered]").count() == 1
    steps = page.locator("[data-testid=events] tbody tr")
    assert [steps.nth(i).get_attribute("data-event") for i in range(steps.count())] == [
        "published", "stored", "delivered", "delivered", "nacked", "delivered", "nacked", "timed_out",
        "dead_lettered", "delivered", "acked"]

    page.goto(f"{live_server.url}/tracing/?business_id=order-42")
    with page.expect_download() as download:
        page.click("[data-testid=export-csv]")
    rows = list(csv.DictReader(io.StringIO(open(download.value.path()).read())))
    assert [(r["message_id"], r["group_states"]) for r in rows] == [
        ("m-retry", "audit=dead_lettered;billing=acked")]

    # the auditor has nothing to press, and asking anyway is refused
    page.goto(f"{live_server.url}/tracing/index/")
    assert page.locator("[data-testid=rebuild-now]").count() == 0
    assert page.locator("[data-testid=save-schedule]").count() == 0
    assert TracedMessage.objects.count() == 2


def test_auditor_cannot_start_a_build_or_change_the_schedule(client, make_user):
    make_user("aud-1", "auditor")
    client.login(request=HttpRequest(), username="aud-1", password="pw-for-tests-1")  # axes counts per request
    assert client.get("/tracing/index/").status_code == 200
    assert client.post("/tracing/index/rebuild/").status_code == 403
    assert client.post("/tracing/index/schedule/", {"every_minutes": 1, "enabled": "on"}).status_code == 403
    assert IndexRun.objects.count() == 0 and AuditRecord.objects.count() == 0
