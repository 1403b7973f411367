"""Trace search (REST and the page): who may trace which message, the cluster filter and column, search by key and
business id, and cursor pages that hold every match exactly once.

Search only: the lookup rows are written here from known inputs (the job's own loading is tested in
test_index_job); the topics and clusters that say which team owns a message are rows of the platform's tables.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.http import HttpRequest

from tests.tracing.factories import BASE, cluster, message, topic

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/api/v1/traces/messages/"


@pytest.fixture
def estate(make_user):
    """payments owns orders (prod); logistics owns shipments (prod) and orders in dev (the same name in another
    environment). Messages: m-pay-1/2 on orders@prod-a, m-pay-b on orders@prod-b, m-log on shipments@prod-a,
    m-dev on orders@dev-a (logistics'), m-lost on orders of a cluster the platform does not know."""
    prod_a, prod_b, dev_a = cluster("prod-a", "prod"), cluster("prod-b", "prod"), cluster("dev-a", "dev")
    topic("orders", "payments", prod_a)
    topic("shipments", "logistics", prod_a)
    topic("orders", "logistics", dev_a)
    message("m-pay-1", topic="orders", key="cust-7", business_id="order-1", minutes=1, cluster="prod-a")
    message("m-pay-2", topic="orders", key="cust-8", business_id="order-2", minutes=2, cluster="prod-a")
    message("m-pay-b", topic="orders", key="cust-7", business_id="order-3", minutes=3, cluster=prod_b.name)
    message("m-log", topic="shipments", key="cust-7", business_id="order-1", minutes=4, cluster="prod-a")
    message("m-dev", topic="orders", key="cust-7", business_id="order-1", minutes=5, cluster="dev-a")
    message("m-lost", topic="orders", key="cust-7", business_id="order-1", minutes=6, cluster="elsewhere")
    return {"dev": make_user("dev-pay", "developer", team="payments"),
            "other": make_user("dev-log", "developer", team="logistics"),
            "auditor": make_user("aud-1", "auditor"), "sre": make_user("sre-1", "sre")}


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [m["message_id"] for m in response.json()["results"]]


def test_a_developer_traces_their_teams_topic_and_is_refused_another_teams_over_rest(api_for, estate):
    dev = api_for(estate["dev"])
    body = dev.get(f"{URL}m-pay-1/")
    assert body.status_code == 200 and body.json()["topic"] == "orders" and body.json()["cluster"] == "prod-a"
    for other in ("m-log", "m-dev", "m-lost"):  # another team's topic, the same name elsewhere, an unknown cluster
        refused = dev.get(f"{URL}{other}/")
        assert refused.status_code == 403, other
        assert "none of your teams owns" in refused.json()["detail"]
        assert "timeline" not in refused.json()
    assert dev.get(f"{URL}nope/").status_code == 404
    # searches never show another team's message, whatever the criterion
    assert ids(dev.get(URL, {"key": "cust-7"})) == ["m-pay-b", "m-pay-1"]
    assert ids(dev.get(URL, {"business_id": "order-1"})) == ["m-pay-1"]
    assert ids(dev.get(URL, {"message_id": "m-log"})) == []
    assert ids(dev.get(URL, {"topic": "orders"})) == ["m-pay-b", "m-pay-2", "m-pay-1"]
    export = dev.get(f"{URL}export/", {"key": "cust-7"})
    lines = b"".join(export.streaming_content).decode().splitlines()
    assert [line.split(",")[0] for line in lines[1:]] == ["m-pay-b", "m-pay-1"]
    # the other team sees its own two and none of payments'
    assert ids(api_for(estate["other"]).get(URL, {"key": "cust-7"})) == ["m-dev", "m-log"]


def test_auditors_and_sres_trace_every_message(api_for, estate):
    everything = ["m-lost", "m-dev", "m-log", "m-pay-b", "m-pay-1"]
    for role in ("auditor", "sre"):
        client = api_for(estate[role])
        assert ids(client.get(URL, {"key": "cust-7"})) == everything
        assert client.get(f"{URL}m-log/").status_code == 200


def test_a_developer_on_the_pages(client, estate):
    client.login(request=HttpRequest(), username="dev-pay", password="pw-for-tests-1")
    assert client.get("/tracing/messages/m-pay-1/").status_code == 200
    refused = client.get("/tracing/messages/m-log/")
    assert refused.status_code == 403 and b"none of your teams owns" in refused.content
    page = client.get("/tracing/", {"key": "cust-7"})
    assert [m.message_id for m in page.context["results"]] == ["m-pay-b", "m-pay-1"]
    assert b'data-testid="team-scope"' in page.content
    bad = client.get("/tracing/", {"key": "cust-7", "cursor": "junk"})
    assert bad.status_code == 400 and b'data-testid="error-cursor"' in bad.content
    assert client.get("/tracing/index/").status_code == 403  # index builds stay with SREs and auditors


def test_the_cluster_filter_and_key_search_return_exactly_the_matching_rows(api_for, estate):
    auditor = api_for(estate["auditor"])
    assert ids(auditor.get(URL, {"cluster": "prod-b"})) == ["m-pay-b"]
    assert ids(auditor.get(URL, {"cluster": "prod-a"})) == ["m-log", "m-pay-2", "m-pay-1"]
    assert ids(auditor.get(URL, {"cluster": "prod-a", "key": "cust-7"})) == ["m-log", "m-pay-1"]
    assert ids(auditor.get(URL, {"cluster": "dev-a", "business_id": "order-1"})) == ["m-dev"]
    assert ids(auditor.get(URL, {"key": "cust-8"})) == ["m-pay-2"]
    assert ids(auditor.get(URL, {"cluster": "prod-b", "key": "cust-8"})) == []
    assert [m["cluster"] for m in auditor.get(URL, {"key": "cust-7"}).json()["results"]] == [
        "elsewhere", "dev-a", "prod-a", "prod-b", "prod-a"]
    unknown = auditor.get(URL, {"cluster": "atlantis"})
    assert unknown.status_code == 400 and set(unknown.json()) == {"cluster"}
    # the developer's cluster filter works inside their scope
    assert ids(api_for(estate["dev"]).get(URL, {"cluster": "prod-a"})) == ["m-pay-2", "m-pay-1"]


def walk(client, params: dict, page_size: int) -> tuple[list[str], list[dict]]:
    """Follow the next links from the first page; every id in order, and each page's body."""
    bodies = [client.get(URL, {**params, "page_size": page_size}).json()]
    while bodies[-1]["next"]:
        assert len(bodies) < 100, "the next links never end"
        bodies.append(client.get(bodies[-1]["next"]).json())
    return [m["message_id"] for body in bodies for m in body["results"]], bodies


def test_paging_returns_every_matching_message_exactly_once(api_for, make_user):
    cluster("prod-a", "prod")
    # 95 matches, many sharing a first_at (ties across page boundaries), plus messages of another topic
    made = []
    for i in range(95):
        at = BASE + timedelta(seconds=i // 7)  # runs of 7 messages with the same first_at
        message(f"m-{i:03d}", topic="orders", at=at)
        made.append((at, f"m-{i:03d}"))
    for i in range(10):
        message(f"x-{i}", topic="other", at=BASE + timedelta(seconds=i))
    expected = [mid for _, mid in sorted(made, reverse=True)]
    client = api_for(make_user("aud-p", "auditor"))

    seen, bodies = walk(client, {"topic": "orders"}, page_size=10)
    assert seen == expected and len(set(seen)) == 95
    assert [len(b["results"]) for b in bodies] == [10] * 9 + [5]
    assert bodies[0]["previous"] is None and bodies[-1]["next"] is None
    # back from the last page: the previous links give the same pages in reverse
    back = [bodies[-1]]
    while back[-1]["previous"]:
        back.append(client.get(back[-1]["previous"]).json())
    assert [[m["message_id"] for m in b["results"]] for b in reversed(back)] == [
        [m["message_id"] for m in b["results"]] for b in bodies]
    # one page of all, and a page size that divides the matches
    assert walk(client, {"topic": "orders"}, page_size=500)[0] == expected
    seen, bodies = walk(client, {"topic": "orders"}, page_size=19)
    assert seen == expected and len(bodies) == 5


def test_bad_paging_input_is_a_400_naming_the_field(api_for, make_user):
    client = api_for(make_user("aud-b", "auditor"))
    for cursor in ("not-a-cursor", "eyJ4IjoxfQ", "WyIyMDI2LTAxLTAxIiwibSIsMF0"):  # junk, a dict, a naive time
        response = client.get(URL, {"key": "k", "cursor": cursor})
        assert response.status_code == 400 and set(response.json()) == {"cursor"}, cursor
    for size in ("0", "501", "ten"):
        response = client.get(URL, {"key": "k", "page_size": size})
        assert response.status_code == 400 and set(response.json()) == {"page_size"}, size
