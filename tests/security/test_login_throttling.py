"""Login throttling (django-axes): after 30 wrong passwords the right one is refused too, on the web form and
at POST /api/v1/auth/token/; an admin sees the lock-out and lifts it (both audited); then the login works."""

import pytest
from django.test import Client

from apps.audit.models import AuditRecord
from tests.conftest import TEST_PASSWORD

pytestmark = pytest.mark.django_db

FAILURES = 30


def _web_login(client: Client, username: str, password: str):
    return client.post("/login/", {"username": username, "password": password})


def _api_login(api, username: str, password: str):
    return api.post("/api/v1/auth/token/", {"username": username, "password": password}, format="json")


def test_the_web_form_refuses_the_right_password_after_30_failures_until_an_admin_lifts_it(make_user, api_for):
    from django.conf import settings

    assert settings.AXES_FAILURE_LIMIT <= FAILURES
    make_user("dev-locked", "developer")
    admin = make_user("root-1", "admin", superuser=True)
    web = Client()
    for _ in range(FAILURES):
        assert _web_login(web, "dev-locked", "wrong-password").status_code in (200, 429)
    refused = _web_login(web, "dev-locked", TEST_PASSWORD)
    assert refused.status_code == 429
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in web.session

    locked = AuditRecord.objects.get(action="login.locked_out")
    assert (locked.actor_name, locked.after["username"]) == ("system:login-guard", "dev-locked")

    listed = api_for(admin).get("/api/v1/lockouts/").json()["results"]
    assert [(x["username"], x["ip_address"]) for x in listed] == [("dev-locked", "127.0.0.1")]
    assert listed[0]["failures"] >= settings.AXES_FAILURE_LIMIT

    lifted = api_for(admin).post(f"/api/v1/lockouts/{listed[0]['id']}/lift/")
    assert lifted.status_code == 200
    record = AuditRecord.objects.get(action="login.lockout_lifted")
    assert (record.actor_name, record.object_id, record.source) == ("root-1", "dev-locked", "api")
    assert api_for(admin).get("/api/v1/lockouts/").json()["results"] == []

    assert _web_login(web, "dev-locked", TEST_PASSWORD).status_code == 302
    assert web.session["_auth_user_id"]


def test_the_token_endpoint_refuses_the_right_password_after_30_failures_until_an_admin_lifts_it(make_user,
                                                                                                  api_for, client):
    make_user("bot-locked", "developer")
    admin = make_user("root-1", "admin", superuser=True)
    anonymous = api_for(None)
    for _ in range(FAILURES):
        assert _api_login(anonymous, "bot-locked", "wrong-password").status_code in (400, 429)
    refused = _api_login(anonymous, "bot-locked", TEST_PASSWORD)
    assert refused.status_code == 429
    assert "token" not in refused.json() and "Too many failed logins" in refused.json()["detail"]
    assert AuditRecord.objects.filter(action="login.locked_out", object_id="bot-locked").count() == 1

    # the admin lifts it on the web page
    client.force_login(admin)
    page = client.get("/security/lockouts/")
    assert page.status_code == 200 and "bot-locked" in page.content.decode()
    attempt_id = api_for(admin).get("/api/v1/lockouts/").json()["results"][0]["id"]
    assert client.post(f"/security/lockouts/{attempt_id}/lift/").status_code == 302
    assert AuditRecord.objects.get(action="login.lockout_lifted").source == "web"

    ok = _api_login(anonymous, "bot-locked", TEST_PASSWORD)
    assert ok.status_code == 200 and ok.json()["token"]


def test_a_lock_out_holds_for_one_username_and_address_only(make_user):
    make_user("dev-a", "developer")
    make_user("dev-b", "developer")
    web = Client()
    for _ in range(FAILURES):
        _web_login(web, "dev-a", "wrong-password")
    assert _web_login(web, "dev-a", TEST_PASSWORD).status_code == 429
    assert _web_login(Client(REMOTE_ADDR="127.0.0.2"), "dev-a", TEST_PASSWORD).status_code == 302
    assert _web_login(Client(), "dev-b", TEST_PASSWORD).status_code == 302


def test_only_admins_see_and_lift_lock_outs(make_user, api_for, client):
    sre = make_user("sre-1", "sre")
    assert api_for(sre).get("/api/v1/lockouts/").status_code == 403
    assert api_for(None).get("/api/v1/lockouts/").status_code == 401
    client.force_login(sre)
    assert client.get("/security/lockouts/").status_code == 403


def test_the_api_throttles_anonymous_callers_per_address_with_counts_in_redis(monkeypatch):
    """The anonymous rate, lowered for the test (the class reads its rate once): the fourth call in a minute
    from one address gets 429; another address is not affected. The count is in the stack's Redis. (DRF checks
    throttles after permissions, so the open token endpoint is where anonymous callers meet it.)"""
    from django.core.cache import cache
    from rest_framework.test import APIClient
    from rest_framework.throttling import AnonRateThrottle

    monkeypatch.setattr(AnonRateThrottle, "rate", "3/minute", raising=False)
    address = "127.0.0.77"
    cache.delete(f"throttle_anon_{address}")
    body = {"username": "nobody", "password": "wrong"}
    answers = [APIClient(REMOTE_ADDR=address).post("/api/v1/auth/token/", body, format="json").status_code
               for _ in range(4)]
    assert answers == [400, 400, 400, 429]
    assert len(cache.get(f"throttle_anon_{address}")) == 3
    assert APIClient(REMOTE_ADDR="127.0.0.78").post("/api/v1/auth/token/", body, format="json").status_code == 400
    cache.delete_many([f"throttle_anon_{address}", "throttle_anon_127.0.0.78"])
