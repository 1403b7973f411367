"""Issue 19, item 2: plots on the cluster, topic and group pages, read through the control plane's fixed Prometheus
queries (apps/clusters/series.py) and drawn by uPlot from our own static files; totals that do not drop when a broker
restarts. Real Prometheus (per module, 1 s scrapes), real broker, real Celery worker, real Chromium."""

from __future__ import annotations

import socket
import time

import pytest

from broker_core.client import Consumer, Producer
from tests.alerts.conftest import prometheus_query, wait_for
from tests.broker.helpers import Received
from tests.integration.conftest import TOPIC

pytestmark = pytest.mark.django_db(transaction=True)


def series_answer(page, action, needle: str = "/series/") -> dict:
    """What the page fetched from the series endpoint while `action` ran (status 200 asserted)."""
    with page.expect_response(lambda r: needle in r.url) as info:
        action()
    response = info.value
    assert response.status == 200, response.text()
    return response.json()


def drawn(page) -> int:
    """Wait for the plots to be drawn; the number of uPlot canvases in the plot section."""
    section = page.get_by_test_id("plots")
    page.wait_for_function("document.querySelector('[data-testid=plots]').dataset.state !== 'loading'")
    assert section.get_attribute("data-state") == "drawn", page.get_by_test_id("plot-error").inner_text()
    return section.locator(".plot-panel canvas").count()


def points(answer: dict, panel: str, series: str) -> list[float]:
    [found] = [s for p in answer["panels"] if p["id"] == panel for s in p["series"] if s["name"] == series]
    return [v for v in found["values"] if v is not None]


def broker_up(prometheus: str, cluster: str) -> list[str]:
    return [r["value"][1] for r in prometheus_query(prometheus, f'up{{job="switchyard-brokers", cluster="{cluster}"}}')]


def test_after_traffic_the_pages_plot_series_the_range_picker_queries_its_range_and_totals_survive_a_restart(
        governed, monitoring, alert_settings, celery_worker, page, live_server):
    from apps.alerts import tasks
    from apps.bindings.models import Binding
    from tests.support.browser import login

    cp, prometheus = governed.cp, monitoring["prometheus"]
    broker = governed.cluster.broker()
    assert tasks.write_targets.delay().get(timeout=30) >= 1  # Prometheus learns where the broker is
    published = f'switchyard_topic_published_total{{cluster="{cp.name}", topic="{TOPIC}"}}'
    wait_for(lambda: broker_up(prometheus, cp.name) == ["1"], 60, "Prometheus to scrape the broker")

    # demo-like traffic: 120 paid orders consumed by the group, then 40 left waiting (a backlog with an age)
    got = Received()
    with Producer(**governed.producer) as producer:
        with Consumer(TOPIC, "shipping", got.handler("c"), **governed.consumer):
            # the topic's series exist (at 0) before the traffic, so every message shows in rate() and increase()
            wait_for(lambda: [r["value"][1] for r in prometheus_query(prometheus, published)] == ["0"], 60,
                     "Prometheus to scrape the topic before any traffic")
            for i in range(120):
                producer.send(TOPIC, f"order {i}".encode(), message_type="paid")
            wait_for(lambda: len(got.ids("c")) >= 120, 30, "the group to receive 120 messages")
        for i in range(40):
            producer.send(TOPIC, f"waiting {i}".encode(), message_type="paid")
    wait_for(lambda: [r["value"][1] for r in prometheus_query(prometheus, published)] == ["160"], 60,
             "Prometheus to scrape the 160 published messages")
    depth = f'switchyard_group_depth{{cluster="{cp.name}", group="shipping"}}'
    wait_for(lambda: [r["value"][1] for r in prometheus_query(prometheus, depth)] == ["40"], 60,
             "Prometheus to scrape the backlog")
    # a rate needs two samples of a series in its window: the group's delivered counter may have appeared with the
    # deliveries (no sample at 0 before them), so the page is read once Prometheus can rate both counters
    for counter in (published, f'switchyard_group_delivered_total{{cluster="{cp.name}", group="shipping"}}'):
        wait_for(lambda c=counter: prometheus_query(prometheus, f"rate({c}[1m])"), 60,
                 f"Prometheus to hold two samples of {counter}")

    login(page, live_server.url, governed.people.sre.username)
    answer = series_answer(page, lambda: page.goto(f"{live_server.url}/topics/{governed.topic.pk}/"))
    assert answer["scope"] == {"cluster": cp.name, "topic": TOPIC, "group": ""}
    assert (answer["range"], answer["end"] - answer["start"]) == ("1h", 3600)
    assert max(points(answer, "rates", "published")) > 0 and max(points(answer, "rates", "delivered")) > 0
    assert points(answer, "backlog", "waiting")[-1] == 40
    assert max(points(answer, "lag", "age")) > 0
    assert points(answer, "consumers", "consumers")  # 1 while consuming, 0 since
    assert answer["totals"]["published"] == 160 and answer["totals"]["delivered"] >= 120
    assert drawn(page) == 6  # one canvas per panel
    assert page.get_by_test_id("plot-totals").locator("[data-total=published]").inner_text().startswith("160 ")

    # the range picker asks for the range it shows
    quarter = series_answer(page, lambda: page.get_by_test_id("plot-range").select_option("15m"), "range=15m")
    assert (quarter["range"], quarter["end"] - quarter["start"]) == ("15m", 900)
    assert quarter["step"] < answer["step"] and max(points(quarter, "rates", "published")) > 0
    drawn(page)
    assert page.get_by_test_id("plots").get_attribute("data-range") == "15m"

    # a clean broker restart: Prometheus sees the broker go and come back, and no total drops
    broker.stop()
    wait_for(lambda: broker_up(prometheus, cp.name) == ["0"], 60, "Prometheus to see the broker down")
    broker.start()
    wait_for(lambda: broker_up(prometheus, cp.name) == ["1"], 60, "Prometheus to scrape the restarted broker")
    after = series_answer(page, lambda: page.reload())
    assert after["totals"]["published"] == 160 and after["totals"]["delivered"] >= answer["totals"]["delivered"]
    assert after["in_range"]["published"] >= 160  # increase() adds across resets (and only extrapolates upwards)
    assert drawn(page) == 6

    # the cluster page and the group's page draw their own plots
    cluster_answer = series_answer(page, lambda: page.goto(f"{live_server.url}/clusters/{cp.name}/"))
    assert cluster_answer["totals"]["published"] == 160 and drawn(page) == 6
    assert page.locator("[data-testid=topic-stats] [data-figure=published]").first.inner_text() == "160"
    binding = Binding.objects.get(topic=governed.topic, group="shipping")
    group_answer = series_answer(page, lambda: page.goto(f"{live_server.url}/bindings/{binding.pk}/"))
    assert group_answer["scope"]["group"] == "shipping" and points(group_answer, "backlog", "waiting")[-1] == 40
    assert drawn(page) == 6


def test_the_last_step_of_every_range_is_not_before_now_even_just_past_a_step(monitoring):
    """The plots' last point sees the latest scrape: with the clock a fraction of a second past a step, the time axis
    ends at the next step, not at the second floored (CI: the 15-minute range of a topic scraped for two seconds had
    no rate at all, its last step before the second sample)."""
    import math

    from apps.clusters.series import RANGES, Prometheus, Scope, read_series

    with Prometheus(monitoring["prometheus"]) as prometheus:
        for range_key in RANGES:
            step = read_series(prometheus, Scope("no-such-cluster"), range_key)["step"]
            now = (math.floor(time.time() / step) - 1) * step + 0.6  # just past a step, in the past
            answer = read_series(prometheus, Scope("no-such-cluster"), range_key, now=now)
            assert answer["times"][-1] == answer["end"] and now <= answer["end"] < now + step, range_key
            assert answer["end"] - answer["start"] == RANGES[range_key] and answer["end"] % step == 0


def test_the_series_endpoint_refuses_readers_without_permission_and_bad_ranges(make_cluster, approved_topic,
                                                                              make_user, client):
    cp = make_cluster()
    topic = approved_topic(cp)
    urls = [f"/clusters/{cp.name}/series/", f"/clusters/series/topic/{topic.pk}/", "/clusters/series/binding/1/"]
    for url in urls:
        assert client.get(url).status_code == 403  # anonymous: refused, not redirected
    client.force_login(make_user("nobody"))  # no role: reads none of these pages
    for url in urls:
        assert client.get(url, {"range": "1h"}).status_code == 403, url
    assert client.get("/clusters/series/binding/999999/").status_code == 403  # before the object is looked up

    client.force_login(make_user("sre-2", "sre"))
    for bad in ("2d", "", "1h;drop", "rate(x[5m])"):
        response = client.get(urls[1], {"range": bad})
        assert response.status_code == 400, bad
        body = response.json()
        assert "range" in body["errors"] and "15m, 1h, 6h, 24h" in body["message"]
    assert client.get("/clusters/series/binding/999999/").status_code == 404


def test_prometheus_down_is_said_in_the_plot_area_and_the_rest_of_the_page_works(make_cluster, make_user, settings,
                                                                                 page, live_server, client):
    from tests.support.browser import login

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        settings.SWITCHYARD_PROMETHEUS_URL = f"http://127.0.0.1:{probe.getsockname()[1]}"
    cp = make_cluster()
    client.force_login(make_user("sre-3", "sre"))
    response = client.get(f"/clusters/{cp.name}/series/")
    assert response.status_code == 503 and response.json()["error"] == "prometheus_unavailable"

    login(page, live_server.url, "sre-3")
    page.clock.install()  # the page's timers under the test's control (auto-refresh below)
    page.goto(f"{live_server.url}/clusters/{cp.name}/")
    error = page.get_by_test_id("plot-error")
    error.wait_for()
    assert "Prometheus at" in error.inner_text() and "did not answer" in error.inner_text()
    assert page.get_by_test_id("plots").locator("canvas").count() == 0
    assert page.get_by_test_id("zk-status").inner_text() == "reachable"  # the rest of the page is there

    # auto-refresh: the page asks again every 30 s while its box is ticked, and not when it is not
    with page.expect_response(lambda r: "/series/" in r.url) as again:
        page.clock.run_for(31_000)
    assert again.value.status == 503
    page.get_by_test_id("plot-refresh").uncheck()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/series/" in r.url else None)
    page.clock.run_for(61_000)
    with page.expect_request(lambda r: "/series/" in r.url) as chosen:  # a request the page does make
        page.get_by_test_id("plot-range").select_option("6h")
    assert chosen.value.url.endswith("range=6h")
    assert [u.rsplit("range=", 1)[1] for u in asked] == ["6h"]  # no refresh while unticked
