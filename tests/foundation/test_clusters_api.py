import pytest

from apps.audit.models import AuditRecord
from apps.clusters.models import Cluster

pytestmark = pytest.mark.django_db

VALID = {"name": "eu-1", "environment": "prod", "region": "eu-west", "zk_connect": "zk1:2181,zk2:2181",
         "zk_chroot": "/switchyard/eu-1", "storage_level": "file", "description": "Europe"}


def test_anonymous_gets_401(api_for):
    assert api_for(None).get("/api/v1/clusters/").status_code == 401
    response = api_for(None).post("/api/v1/clusters/", VALID, format="json")
    assert response.status_code == 401
    assert Cluster.objects.count() == 0


def test_developer_cannot_create_and_nothing_changes(make_user, api_for):
    dev = make_user("dev-1", "developer", team="payments")
    response = api_for(dev).post("/api/v1/clusters/", VALID, format="json")
    assert response.status_code == 403
    assert "detail" in response.json()
    assert Cluster.objects.count() == 0
    assert AuditRecord.objects.count() == 0
    # ...but may read
    assert api_for(dev).get("/api/v1/clusters/").status_code == 200


def test_sre_creates_with_exactly_one_audit_record(make_user, api_for):
    sre = make_user("sre-1", "sre")
    response = api_for(sre).post("/api/v1/clusters/", VALID, format="json", HTTP_X_REQUEST_ID="req-create-1")
    assert response.status_code == 201, response.content
    cluster = Cluster.objects.get(name="eu-1")
    assert (cluster.environment, cluster.zk_chroot) == ("prod", "/switchyard/eu-1")
    record = AuditRecord.objects.get()
    assert (record.action, record.object_id, record.source, record.request_id) == (
        "cluster.create", str(cluster.pk), "api", "req-create-1")
    assert record.before is None
    assert record.after["zk_connect"] == "zk1:2181,zk2:2181"


def test_sre_update_leaves_one_record_with_before_and_after(make_user, api_for):
    sre = make_user("sre-1", "sre")
    assert api_for(sre).post("/api/v1/clusters/", VALID, format="json").status_code == 201
    response = api_for(sre).patch("/api/v1/clusters/eu-1/", {"status": "maintenance"}, format="json")
    assert response.status_code == 200, response.content
    update = AuditRecord.objects.filter(action="cluster.update").get()
    assert update.before["status"] == "active" and update.after["status"] == "maintenance"
    assert AuditRecord.objects.count() == 2


def test_repair_drift_is_off_by_default_and_set_through_the_api(make_user, api_for):
    sre = make_user("sre-1", "sre")
    created = api_for(sre).post("/api/v1/clusters/", VALID, format="json").json()
    assert created["repair_drift"] is False
    response = api_for(sre).patch("/api/v1/clusters/eu-1/", {"repair_drift": True}, format="json")
    assert response.status_code == 200 and response.json()["repair_drift"] is True
    update = AuditRecord.objects.get(action="cluster.update")
    assert (update.before["repair_drift"], update.after["repair_drift"]) == (False, True)
    bad = api_for(sre).patch("/api/v1/clusters/eu-1/", {"repair_drift": "maybe"}, format="json")
    assert bad.status_code == 400 and "repair_drift" in bad.json()
    assert Cluster.objects.get().repair_drift is True and AuditRecord.objects.count() == 2


def test_invalid_body_gets_field_errors_and_changes_nothing(make_user, api_for):
    sre = make_user("sre-1", "sre")
    bad = {**VALID, "name": "Not A Slug", "zk_connect": "zk1", "zk_chroot": "relative/", "environment": "moon"}
    response = api_for(sre).post("/api/v1/clusters/", bad, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"name", "zk_connect", "zk_chroot", "environment"}
    assert Cluster.objects.count() == 0 and AuditRecord.objects.count() == 0


def test_a_port_out_of_range_is_a_field_error(make_user, api_for):
    """Found by schemathesis: "zk1:99999" passed the pattern, and the cluster's stats page crashed in kazoo."""
    sre = make_user("sre-1", "sre")
    response = api_for(sre).post("/api/v1/clusters/", {**VALID, "zk_connect": "zk1:2181,zk2:99999"}, format="json")
    assert response.status_code == 400
    assert "zk2:99999" in response.json()["zk_connect"][0]
    assert api_for(sre).post("/api/v1/clusters/", {**VALID, "zk_connect": "zk1:0"}, format="json").status_code == 400
    assert Cluster.objects.count() == 0 and AuditRecord.objects.count() == 0


def test_duplicate_name_is_a_field_error(make_user, api_for):
    sre = make_user("sre-1", "sre")
    api_for(sre).post("/api/v1/clusters/", VALID, format="json")
    response = api_for(sre).post("/api/v1/clusters/", {**VALID, "zk_chroot": "/other"}, format="json")
    assert response.status_code == 400 and "name" in response.json()


def test_filtering_and_pagination(make_user, api_for):
    sre = make_user("sre-1", "sre")
    for i, env in enumerate(["prod", "dev", "prod"]):
        api_for(sre).post("/api/v1/clusters/", {**VALID, "name": f"c{i}-x", "environment": env,
                                                 "zk_chroot": f"/c{i}"}, format="json")
    body = api_for(sre).get("/api/v1/clusters/?environment=prod").json()
    assert body["count"] == 2 and {c["name"] for c in body["results"]} == {"c0-x", "c2-x"}


def test_health_reads_zookeeper_live(make_user, api_for, zk_connect, zk_chroot):
    from kazoo.client import KazooClient

    from broker_core.layout import LAYOUT, encode

    sre = make_user("sre-1", "sre")
    api_for(sre).post("/api/v1/clusters/", {**VALID, "zk_connect": zk_connect, "zk_chroot": zk_chroot},
                      format="json")
    body = api_for(sre).get("/api/v1/clusters/eu-1/health/").json()
    assert body["reachable"] is True and body["brokers"] == []

    zk = KazooClient(hosts=zk_connect)
    zk.start()
    try:
        zk.create(zk_chroot + LAYOUT.broker("node-1"), encode({"node_id": "node-1", "host": "127.0.0.1",
                                                               "port": 9999}), ephemeral=True, makepath=True)
        body = api_for(sre).get("/api/v1/clusters/eu-1/health/").json()
        assert [(b["node_id"], b["port"]) for b in body["brokers"]] == [("node-1", 9999)]
    finally:
        zk.stop()
        zk.close()
    # the ephemeral node went with the session
    assert api_for(sre).get("/api/v1/clusters/eu-1/health/").json()["brokers"] == []


def test_health_reports_unreachable_zookeeper(make_user, api_for, settings):
    settings.SWITCHYARD_ZK_TIMEOUT = 1
    sre = make_user("sre-1", "sre")
    api_for(sre).post("/api/v1/clusters/", {**VALID, "zk_connect": "127.0.0.1:1"}, format="json")
    body = api_for(sre).get("/api/v1/clusters/eu-1/health/").json()
    assert body["reachable"] is False and "did not answer" in body["error"]


def test_openapi_schema_and_docs_are_served(make_user, api_for, client):
    schema = api_for(make_user("dev-1", "developer")).get("/api/v1/schema/")
    assert schema.status_code == 200 and b"/api/v1/clusters/" in schema.content
    assert client.get("/api/v1/docs/").status_code == 200


def test_token_endpoint(make_user, api_for):
    make_user("sre-1", "sre")
    response = api_for(None).post("/api/v1/auth/token/", {"username": "sre-1", "password": "pw-for-tests-1"})
    assert response.status_code == 200 and len(response.json()["token"]) == 64  # 256 random bits, hex
    token = response.json()["token"]
    assert api_for(None).get("/api/v1/clusters/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200
    assert api_for(None).post("/api/v1/auth/token/", {"username": "sre-1", "password": "x"}).status_code == 400

