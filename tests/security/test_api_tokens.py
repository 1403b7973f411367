"""API tokens: hashed at rest, expiring, revocable; last use recorded; team service accounts act with their
own roles and team."""

from datetime import timedelta

import pytest
from django.utils import timezone
from knox.settings import CONSTANTS
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken
from apps.audit.models import AuditRecord
from tests.conftest import TEST_PASSWORD

pytestmark = pytest.mark.django_db


def _client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def _login_token(username: str) -> dict:
    response = APIClient().post("/api/v1/auth/token/", {"username": username, "password": TEST_PASSWORD},
                                format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_token_from_the_password_endpoint_works_and_expires_in_30_days(make_user):
    make_user("sre-1", "sre")
    body = _login_token("sre-1")
    expiry = timezone.datetime.fromisoformat(body["expiry"])
    assert timedelta(days=29, hours=23) < expiry - timezone.now() <= timedelta(days=30)
    assert _client(body["token"]).get("/api/v1/clusters/").status_code == 200


def test_the_stored_value_is_not_the_token(make_user):
    make_user("sre-1", "sre")
    secret = _login_token("sre-1")["token"]
    stored = ApiToken.objects.get()
    row = {k: v for k, v in stored.__dict__.items() if not k.startswith("_")}
    assert secret not in str(row)
    assert stored.digest != secret and len(stored.digest) == 128  # SHA-512
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(f"SELECT * FROM {ApiToken._meta.db_table}")
        assert secret not in str(cur.fetchall())


def test_an_expired_token_is_refused(make_user):
    make_user("sre-1", "sre")
    secret = _login_token("sre-1")["token"]
    ApiToken.objects.update(expiry=timezone.now() - timedelta(seconds=1))
    response = _client(secret).get("/api/v1/clusters/")
    assert response.status_code == 401


def test_the_hourly_sweep_deletes_expired_tokens_with_an_audit_record_each(make_user):
    from django_celery_beat.models import PeriodicTask

    from apps.accounts.tasks import delete_expired_tokens

    make_user("sre-1", "sre")
    make_user("dev-1", "developer")
    old, live = _login_token("sre-1")["token"], _login_token("sre-1")["token"]
    other_old = _login_token("dev-1")["token"]
    key = CONSTANTS.TOKEN_KEY_LENGTH
    ApiToken.objects.filter(token_key__in=[old[:key], other_old[:key]]).update(
        expiry=timezone.now() - timedelta(minutes=5))
    # using a live token refuses nothing and deletes nothing else: expired tokens stay listed until the sweep
    assert _client(live).get("/api/v1/clusters/").status_code == 200
    assert _client(old).get("/api/v1/clusters/").status_code == 401
    assert ApiToken.objects.count() == 3

    scheduled = PeriodicTask.objects.get(name="Delete expired API tokens")  # made by the migration; beat runs it
    assert (scheduled.task, scheduled.interval.every, scheduled.interval.period, scheduled.enabled) == (
        delete_expired_tokens.name, 1, "hours", True)
    assert delete_expired_tokens.apply().get() == 2  # the periodic task's body, here in the test process
    assert [t.user.username for t in ApiToken.objects.all()] == ["sre-1"]
    assert _client(live).get("/api/v1/clusters/").status_code == 200
    records = AuditRecord.objects.filter(action="token.expire").order_by("id")
    assert sorted(r.before["owner"] for r in records) == ["dev-1", "sre-1"]
    assert {r.actor_name for r in records} == {"system:token-sweep"}
    assert delete_expired_tokens.apply().get() == 0


def test_a_revoked_token_is_refused_and_the_revocation_is_audited(make_user):
    make_user("sre-1", "sre")
    secret = _login_token("sre-1")["token"]
    client = _client(secret)
    listed = client.get("/api/v1/tokens/").json()["results"]
    assert [t["name"] for t in listed] == ["password login"] and "token" not in listed[0]
    assert client.delete(f"/api/v1/tokens/{listed[0]['id']}/").status_code == 204
    assert client.get("/api/v1/clusters/").status_code == 401
    record = AuditRecord.objects.get(action="token.revoke")
    assert (record.actor_name, record.before["owner"]) == ("sre-1", "sre-1")


def test_last_use_is_recorded(make_user):
    make_user("sre-1", "sre")
    secret = _login_token("sre-1")["token"]
    assert ApiToken.objects.get().last_used_at is None
    before = timezone.now()
    _client(secret).get("/api/v1/clusters/")
    assert ApiToken.objects.get().last_used_at >= before
    shown = _client(secret).get("/api/v1/tokens/").json()["results"][0]["last_used_at"]
    assert shown is not None


def test_a_user_makes_a_token_with_a_chosen_life_and_cannot_touch_someone_elses(make_user, api_for):
    dev = make_user("dev-1", "developer", team="payments")
    other = make_user("dev-2", "developer", team="payments")
    made = api_for(dev).post("/api/v1/tokens/", {"name": "ci", "expires_in_days": 7}, format="json")
    assert made.status_code == 201
    body = made.json()
    assert body["owner"] == "dev-1" and len(body["token"]) == 64
    assert timezone.datetime.fromisoformat(body["expiry"]) - timezone.now() <= timedelta(days=7)
    assert api_for(dev).post("/api/v1/tokens/", {"name": "x", "expires_in_days": 3650}, format="json").status_code == 400
    assert api_for(other).delete(f"/api/v1/tokens/{body['id']}/").status_code == 404
    assert _client(body["token"]).get("/api/v1/tokens/").status_code == 200


def test_a_service_accounts_token_acts_with_its_roles_and_its_team(make_user, api_for):
    lead = make_user("lead-1", "approver", "developer", team="payments")
    make_user("dev-9", "developer", team="orders")
    made = api_for(lead).post("/api/v1/service-accounts/", {"team": "payments", "name": "deployer",
                                                            "roles": ["developer"]}, format="json")
    assert made.status_code == 201, made.content
    account = made.json()
    assert (account["username"], account["roles"], account["is_active"]) == ("svc.payments.deployer", ["developer"],
                                                                             True)
    token = api_for(lead).post("/api/v1/tokens/", {"name": "pipeline", "expires_in_days": 90,
                                                    "service_account": account["id"]}, format="json")
    assert token.status_code == 201 and token.json()["owner"] == "svc.payments.deployer"
    bot = _client(token.json()["token"])

    # a developer of payments: may apply for a payments topic, not for another team's, may not approve
    from apps.clusters.models import Cluster

    Cluster.objects.create(name="dev-a", environment="dev", region="r", zk_connect="127.0.0.1:1",
                           zk_chroot="/switchyard/dev-a")
    fields = {"name": "payments.order-paid", "team": "payments", "environment": "dev", "cluster": "dev-a",
              "message_types": ["created"], "expected_peak_mps": 5, "max_message_bytes": 8192,
              "retention_hours": 48, "storage_level": "file", "transactional": False, "ordered": False,
              "description": "made by automation", "reason": "a pipeline needs it"}
    mine = bot.post("/api/v1/topic-applications/", {**fields, "team": "payments"}, format="json")
    theirs = bot.post("/api/v1/topic-applications/", {**fields, "name": "orders.by-bot", "team": "orders"},
                      format="json")
    assert mine.status_code == 201, mine.content
    assert theirs.status_code == 400 and "team" in theirs.json()
    approve = bot.post(f"/api/v1/topic-applications/{mine.json()['id']}/approve/", {"comment": "ok"}, format="json")
    assert approve.status_code == 403  # a developer's roles: no approving
    record = AuditRecord.objects.get(action="topic_application.create")
    assert (record.actor_name, record.source) == ("svc.payments.deployer", "api")

    # disabled by its lead: its tokens stop working
    assert api_for(lead).patch(f"/api/v1/service-accounts/{account['id']}/", {"is_active": False},
                               format="json").status_code == 200
    assert bot.get("/api/v1/topics/").status_code == 401
    actions = list(AuditRecord.objects.filter(action__startswith="service_account.").values_list("action", flat=True))
    assert actions == ["service_account.create", "service_account.update"]


def test_who_may_make_service_accounts_and_which_roles(make_user, api_for):
    dev = make_user("dev-1", "developer", team="payments")
    other_lead = make_user("lead-2", "approver", team="orders")
    lead = make_user("lead-1", "approver", "developer", team="payments")
    body = {"team": "payments", "name": "bot", "roles": ["developer"]}
    assert api_for(dev).post("/api/v1/service-accounts/", body, format="json").status_code == 403
    assert api_for(other_lead).post("/api/v1/service-accounts/", body, format="json").status_code == 403
    admin_role = api_for(lead).post("/api/v1/service-accounts/", {**body, "roles": ["admin"]}, format="json")
    assert admin_role.status_code == 400 and "roles" in admin_role.json()
    assert api_for(lead).post("/api/v1/service-accounts/", body, format="json").status_code == 201
    # a service account's own token may not mint tokens (a leaked token cannot extend itself)
    from apps.accounts.models import ServiceAccount
    from tests.support.tokens import token_for

    bot = _client(token_for(ServiceAccount.objects.get().user))
    assert bot.post("/api/v1/tokens/", {"name": "more", "expires_in_days": 365}, format="json").status_code == 403
    # nobody logs in as a service account with a password
    assert APIClient().post("/api/v1/auth/token/", {"username": "svc.payments.bot", "password": ""},
                            format="json").status_code == 400


def test_throttles_are_per_user_and_anonymous_and_shared_through_redis():
    from django.conf import settings

    rest = settings.REST_FRAMEWORK
    assert rest["DEFAULT_THROTTLE_CLASSES"] == ["rest_framework.throttling.AnonRateThrottle",
                                                "rest_framework.throttling.UserRateThrottle"]
    assert set(rest["DEFAULT_THROTTLE_RATES"]) == {"anon", "user"}
    assert settings.CACHES["default"]["BACKEND"] == "control_plane.cache.RedisCache"
    from django.core.cache import cache

    cache.set("switchyard-throttle-probe", 1, 5)  # the real Redis of the stack answers
    assert cache.get("switchyard-throttle-probe") == 1
    # one redis client per connection pool, not one per cache operation
    client = cache._cache.get_client(write=True)
    assert cache._cache.get_client(write=False) is client
    assert cache.incr("switchyard-throttle-probe") == 2 and cache._cache.get_client(write=True) is client


def test_a_service_account_is_never_given_a_password(make_user, api_for):
    from django.core.exceptions import ValidationError

    from apps.accounts import actions
    from apps.accounts.models import ServiceAccount

    lead = make_user("lead-1", "approver", "developer", team="payments")
    admin = make_user("root-1", "admin", superuser=True)
    assert api_for(lead).post("/api/v1/service-accounts/", {"team": "payments", "name": "bot", "roles": []},
                              format="json").status_code == 201
    account = ServiceAccount.objects.get()
    assert not account.user.has_usable_password()
    with pytest.raises(ValidationError):
        actions.update_user(actor=admin, user=account.user, password="a-long-enough-password")
    account.user.refresh_from_db()
    assert not account.user.has_usable_password()
