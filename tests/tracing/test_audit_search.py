"""The governance audit log's search (REST and CSV): by actor, object, action and time; read-only."""

import csv
import io
from datetime import timedelta

import pytest
from django.http import HttpRequest
from django.utils import timezone

from apps.audit.models import AuditRecord
from apps.clusters import actions as clusters

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def history(make_user):
    sre = make_user("sre-a", "sre")
    other = make_user("sre-b", "sre")
    a = clusters.create_cluster(actor=sre, name="east", environment="prod", region="us-east",
                                zk_connect="127.0.0.1:1", zk_chroot="/sy/east")
    clusters.update_cluster(actor=other, cluster=a, description="moved")
    clusters.create_cluster(actor=other, name="west", environment="dev", region="us-west",
                            zk_connect="127.0.0.1:1", zk_chroot="/sy/west")
    return a


def actions_of(response):
    assert response.status_code == 200, response.content
    return [(r["actor"], r["action"], r["object_repr"]) for r in response.json()["results"]]


def test_search_by_actor_object_action_and_time(make_user, api_for, history):
    api = api_for(make_user("aud-1", "auditor"))
    url = "/api/v1/audit-records/"
    assert actions_of(api.get(url, {"actor": "sre-b"})) == [("sre-b", "cluster.create", "west"),
                                                            ("sre-b", "cluster.update", "east")]
    assert actions_of(api.get(url, {"object_type": "clusters.cluster", "object_id": str(history.pk)})) == [
        ("sre-b", "cluster.update", "east"), ("sre-a", "cluster.create", "east")]
    assert actions_of(api.get(url, {"action": "cluster.update"})) == [("sre-b", "cluster.update", "east")]
    assert len(actions_of(api.get(url, {"action": "cluster."}))) == 3
    assert actions_of(api.get(url, {"object": "wes"})) == [("sre-b", "cluster.create", "west")]
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    assert actions_of(api.get(url, {"since": later})) == []
    assert len(actions_of(api.get(url, {"until": later}))) == 3


def test_csv_export_and_read_only(make_user, api_for, history):
    api = api_for(make_user("aud-1", "auditor"))
    response = api.get("/api/v1/audit-records/export/", {"actor": "sre-a"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r["actor"], r["action"], r["object"]) for r in rows] == [("sre-a", "cluster.create", "east")]
    assert '"name": "east"' in rows[0]["after"]
    count = AuditRecord.objects.count()
    first = AuditRecord.objects.first().pk
    assert api.delete(f"/api/v1/audit-records/{first}/").status_code in (403, 405)
    assert api.put(f"/api/v1/audit-records/{first}/", {"action": "x"}).status_code in (403, 405)
    assert AuditRecord.objects.count() == count


def test_web_search_and_export(client, make_user, history):
    make_user("aud-web", "auditor")
    # a password login goes through the login guard (django-axes), which needs the request it counts against
    client.login(request=HttpRequest(), username="aud-web", password="pw-for-tests-1")
    page = client.get("/audit/", {"actor": "sre-a"})
    assert page.status_code == 200
    assert [r.action for r in page.context["object_list"]] == ["cluster.create"]
    export = client.get("/audit/export.csv", {"action": "cluster.update"})
    text = b"".join(export.streaming_content).decode()
    assert text.splitlines()[0].startswith("id,timestamp,actor,action")
    assert len(text.splitlines()) == 2 and ",cluster.update," in text
    make_user("dev-web", "developer")
    client.login(request=HttpRequest(), username="dev-web", password="pw-for-tests-1")
    assert client.get("/audit/").status_code == 403
