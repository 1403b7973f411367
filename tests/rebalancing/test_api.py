"""The rebalance REST API (/api/v1/rebalances/): SREs only — developers and approvers are refused before their
input is read — the preview of a plan, refusals as field errors that change nothing, start and abandon (audited).
Against real ZooKeeper: the cluster's brokers and placement are nodes written by the `placed` fixture."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("role", ["dev", "lead"])
def test_developers_and_approvers_are_refused_before_their_input_is_read(role, people, api_for):
    from django.test import Client

    from apps.rebalancing.models import Rebalance

    client = api_for(getattr(people, role))
    for path in ("/api/v1/rebalances/", "/api/v1/rebalances/preview/", "/api/v1/rebalances/1/abandon/",
                 "/api/v1/rebalances/1/resume/"):
        answer = client.post(path, "not json at all", content_type="application/json")
        assert answer.status_code == 403, (path, answer.content)  # not 400: the body was never parsed
    assert client.get("/api/v1/rebalances/").status_code == 403
    web = Client()
    web.force_login(getattr(people, role))
    for path in ("/clusters/any/rebalance/", "/rebalances/1/resume/", "/rebalances/1/abandon/"):
        assert web.post(path, {"remove": ["x"]}).status_code == 403, path
    assert api_for(None).get("/api/v1/rebalances/").status_code == 401
    assert not Rebalance.objects.exists()


def test_an_sre_previews_starts_and_abandons_and_bad_input_changes_nothing(people, api_for, placed):
    from apps.audit.models import AuditRecord
    from apps.rebalancing.models import Rebalance

    sre = api_for(people.sre)
    preview = sre.post("/api/v1/rebalances/preview/", {"cluster": "rb-api"}, format="json")
    assert preview.status_code == 200, preview.content
    plan = preview.json()
    assert plan["brokers"] == ["b1", "b2", "b3", "b4"]
    assert plan["replicas_before"] == {"b1": 2, "b2": 2, "b3": 2}
    assert sorted(plan["replicas_after"].values()) == [1, 1, 2, 2] and plan["replicas_after"]["b4"] == 1
    assert [(s["target"], s["leader"]) for s in plan["steps"]] == [("b4", False)]

    for body, field, words in [({"cluster": "nope"}, "cluster", "does not exist"),
                               ({"cluster": "rb-api", "remove": ["b9"]}, "remove", "neither registered"),
                               ({"cluster": "rb-api", "remove": ["b1", "b2", "b3"]}, "remove", "1 broker would be left"),
                               ({"cluster": "rb-api", "remove": "b1"}, "remove", "list")]:
        answer = sre.post("/api/v1/rebalances/", body, format="json")
        assert answer.status_code == 400 and words in json.dumps(answer.json()[field]), (body, answer.content)
    assert not Rebalance.objects.exists()

    emptying = sre.post("/api/v1/rebalances/preview/", {"cluster": "rb-api", "remove": ["b1"]}, format="json").json()
    assert {s["source"] for s in emptying["steps"]} == {"b1"} and "b1" not in emptying["replicas_after"]

    started = sre.post("/api/v1/rebalances/", {"cluster": "rb-api"}, format="json")
    assert started.status_code == 202, started.content
    body = started.json()
    assert (body["state"], body["position"], body["total"], body["phase"]) == ("running", 0, 1, "add")
    again = sre.post("/api/v1/rebalances/", {"cluster": "rb-api"}, format="json")
    assert again.status_code == 400 and f"Rebalance #{body['id']}" in again.json()["cluster"][0]
    abandoned = sre.post(f"/api/v1/rebalances/{body['id']}/abandon/")
    assert abandoned.status_code == 200 and abandoned.json()["state"] == "abandoned"
    assert sre.post(f"/api/v1/rebalances/{body['id']}/resume/").status_code in (400, 409)
    assert sre.get(f"/api/v1/rebalances/{body['id']}/").json()["steps"] == plan["steps"]
    actions = list(AuditRecord.objects.filter(object_type="rebalancing.rebalance").values_list("action", "actor_name"))
    assert actions == [("rebalance.started", people.sre.username), ("rebalance.abandoned", people.sre.username)]
