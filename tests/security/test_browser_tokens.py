"""Real browser: a developer makes an API token (its secret shown once), uses it, sees its last use, revokes it;
a team lead makes a service account and a token for it; an admin lifts a login lock-out."""

import pytest
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken
from apps.audit.models import AuditRecord
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def _api(secret):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_a_developer_creates_uses_and_revokes_a_token_in_the_web_ui(live_server, page, make_user):
    make_user("dev-web", "developer", team="payments")
    login(page, live_server.url, "dev-web")
    page.click("[data-testid=nav-tokens]")
    page.wait_for_url(f"{live_server.url}/account/tokens/")
    page.fill("#id_name", "laptop script")
    page.select_option("#id_expires_in_days", "7")
    page.click("[data-testid=create-token]")

    secret = page.locator("[data-testid=token-secret]").inner_text().strip()
    assert len(secret) == 64
    row = page.locator("[data-testid=token-row][data-token-name='laptop script']")
    assert row.locator("[data-testid=token-last-used]").inner_text() == "never"
    stored = ApiToken.objects.get(name="laptop script")
    assert stored.digest != secret and secret not in stored.token_key + stored.digest

    assert _api(secret).get("/api/v1/teams/").status_code == 200
    page.goto(f"{live_server.url}/account/tokens/")
    assert page.locator("[data-testid=token-secret]").count() == 0  # shown once
    assert page.locator("[data-testid=token-row][data-token-name='laptop script'] "
                        "[data-testid=token-last-used]").inner_text() != "never"

    page.click("[data-testid='revoke-laptop script']")
    page.wait_for_selector("text=Token laptop script revoked.")
    assert page.locator("[data-testid=token-row][data-token-name='laptop script']").count() == 0
    assert _api(secret).get("/api/v1/teams/").status_code == 401
    assert list(AuditRecord.objects.filter(action__startswith="token.").values_list("action", "actor_name")) == [
        ("token.create", "dev-web"), ("token.revoke", "dev-web")]


def test_a_team_lead_makes_a_service_account_and_its_token_in_the_web_ui(live_server, page, make_user):
    make_user("lead-web", "approver", "developer", team="payments")
    login(page, live_server.url, "lead-web")
    page.click("[data-testid=nav-service-accounts]")
    page.select_option("#id_team", "payments")
    page.fill("#id_name", "deployer")
    page.check("input[name=roles][value=developer]")
    page.click("[data-testid=service-account-form] button[type=submit]")
    page.wait_for_selector("h1:has-text('svc.payments.deployer')")
    page.fill("[data-testid=token-form] #id_name", "pipeline")
    page.click("[data-testid=create-token]")
    secret = page.locator("[data-testid=token-secret]").inner_text().strip()
    teams = _api(secret).get("/api/v1/teams/")
    assert teams.status_code == 200
    assert ApiToken.objects.get(name="pipeline").user.username == "svc.payments.deployer"


def test_an_admin_lifts_a_lock_out_in_the_web_ui(live_server, page, make_user):
    from django.conf import settings

    make_user("dev-locked", "developer")
    make_user("root-web", "admin", superuser=True)
    anonymous = APIClient()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        anonymous.post("/api/v1/auth/token/", {"username": "dev-locked", "password": "wrong"}, format="json")
    assert anonymous.post("/api/v1/auth/token/", {"username": "dev-locked", "password": "pw-for-tests-1"},
                          format="json").status_code == 429
    login(page, live_server.url, "root-web")
    page.click("[data-testid=nav-lockouts]")
    assert page.locator("[data-testid=lockout-row]").count() == 1
    page.click("[data-testid=lift-dev-locked]")
    page.wait_for_selector("text=Nobody is locked out.")
    assert anonymous.post("/api/v1/auth/token/", {"username": "dev-locked", "password": "pw-for-tests-1"},
                          format="json").status_code == 200
    assert AuditRecord.objects.filter(action="login.lockout_lifted", actor_name="root-web").count() == 1
