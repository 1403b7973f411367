"""Moves through the REST API (start, list, detail with steps, rollback; who may call; refusals as field errors)
and through `manage.py move_topic` (start with --wait printing progress, --status, refusals)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from tests.moves.helpers import wait_state

pytestmark = pytest.mark.django_db(transaction=True)


def test_web_form_refusals_show_under_their_field(moving, client):
    from django.http import HttpRequest

    from apps.moves.models import TopicMove
    from apps.topics.models import Topic
    from tests.conftest import TEST_PASSWORD

    client.login(request=HttpRequest(), username=moving.people.sre.username, password=TEST_PASSWORD)
    form = {"topic": moving.topic.pk, "target": moving.cp_a.name, "dead_letters": "discard", "client_follow_s": 5}
    page = client.post("/moves/new/", form)
    assert page.status_code == 400 and 'data-testid="error-target"' in page.content.decode()  # not offered
    Topic.objects.filter(pk=moving.topic.pk).update(ordered=True)
    page = client.post("/moves/new/", {**form, "target": moving.cp_b.name})
    assert page.status_code == 400
    assert 'data-testid="error-topic"' in page.content.decode() and "drain barrier" in page.content.decode()
    assert not TopicMove.objects.exists()
    client.logout()
    client.login(request=HttpRequest(), username=moving.people.dev.username, password=TEST_PASSWORD)
    assert client.post("/moves/new/", form).status_code == 403


def test_rest_start_list_detail_and_rollback(moving, api_for, paused_worker):
    from apps.moves.models import TopicMove

    sre, dev = api_for(moving.people.sre), api_for(moving.people.dev)
    body = {"topic": f"{moving.name}@dev", "target": moving.cp_b.name, "dead_letters": "discard",
            "client_follow_s": 1}
    assert dev.post("/api/v1/moves/", body, format="json").status_code == 403
    assert api_for(None).get("/api/v1/moves/").status_code == 401
    bad = sre.post("/api/v1/moves/", {**body, "target": "no-such-cluster"}, format="json")
    assert bad.status_code == 400 and "target" in bad.json()
    refused = sre.post("/api/v1/moves/", {**body, "target": moving.cp_a.name}, format="json")
    assert refused.status_code == 400 and "already serves" in refused.json()["target"][0]
    assert not TopicMove.objects.exists()

    pause, resume = paused_worker
    pause()  # the move stays at its first step while the API reads and rolls it back
    started = sre.post("/api/v1/moves/", body, format="json")
    assert started.status_code == 202, started.content
    move = started.json()
    assert (move["topic"], move["source"], move["target"], move["state"], move["step"]) == (
        moving.name, moving.cp_a.name, moving.cp_b.name, "running", "provision")
    assert [s["name"] for s in move["steps"]][:2] == ["checks", "provision"] and move["steps"][0]["state"] == "done"
    listed = dev.get(f"/api/v1/moves/?topic={moving.name}").json()  # developers read moves
    assert [m["id"] for m in listed["results"]] == [move["id"]]
    assert dev.post(f"/api/v1/moves/{move['id']}/rollback/").status_code == 403
    rolled = sre.post(f"/api/v1/moves/{move['id']}/rollback/")
    assert rolled.status_code == 202 and rolled.json()["state"] == "rolling_back"
    again = sre.post(f"/api/v1/moves/{move['id']}/rollback/")
    assert again.status_code == 409 and "already being rolled back" in again.json()["detail"]
    resume()
    wait_state(TopicMove.objects.get(pk=move["id"]), "rolled_back")
    detail = dev.get(f"/api/v1/moves/{move['id']}/").json()
    assert detail["state"] == "rolled_back" and {s["name"]: s["state"] for s in detail["steps"]}["rb_deprovision"] == "done"
    assert "/api/v1/moves/{id}/rollback/" in api_for(moving.people.sre).get("/api/v1/schema/?format=json").json()["paths"]


def test_command_moves_a_topic_and_prints_progress(moving):
    from apps.audit.models import AuditRecord
    from apps.moves.models import TopicMove

    with pytest.raises(CommandError) as refused:
        call_command("move_topic", moving.name, env="dev", to=moving.cp_a.name, stdout=io.StringIO())
    assert "already serves" in str(refused.value)
    out = io.StringIO()
    call_command("move_topic", moving.name, env="dev", to=moving.cp_b.name, dead_letters="move", follow_s=1,
                 wait=True, interval=0.2, stdout=out)
    text = out.getvalue()
    move = TopicMove.objects.get()
    assert move.state == "succeeded" and move.requested_as == "system:moves"
    assert f"move #{move.pk} started" in text
    for step in ("Provision on the target", "Drain the source", "Deprovision the source"):
        assert step in text
    assert "objects in ZooKeeper of" in text and "holds nothing of the topic" in text
    status = io.StringIO()
    call_command("move_topic", moving.name, env="dev", status=True, stdout=status)
    shown = status.getvalue()
    assert "Succeeded" in shown and " 7. Deprovision the source" in shown and "Rollback" not in shown
    with pytest.raises(CommandError) as late:
        call_command("move_topic", moving.name, env="dev", rollback=True, stdout=io.StringIO())
    assert "nothing to roll back" in str(late.value)
    assert AuditRecord.objects.filter(action="move.started", actor_name="system:moves", source="cli").exists()
