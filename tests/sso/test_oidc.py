"""OIDC login against a real OpenID provider (django-oauth-toolkit in its own process): the authorization code
flow with PKCE; the user lands in the roles and teams its groups claim maps to and is refused the rest; a group
removed at the provider removes the role at the next login, or when the session is checked again; RP-initiated
logout; an ID token from another issuer is refused."""

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from apps.accounts.models import ExternalIdentity
from apps.accounts.roles import roles_of
from apps.audit.models import AuditRecord
from tests.sso.servers import PASSWORD, path_of, unique, walk_provider

pytestmark = pytest.mark.django_db


def _oidc_login(client: Client, provider, username: str, browser: httpx.Client | None = None):
    """Switchyard → the provider (sign in there) → Switchyard's callback; returns the callback's answer."""
    start = client.get("/oidc/authenticate/?next=/clusters/")
    assert start.status_code == 302 and start["Location"].startswith(provider.issuer + "/authorize/")
    callback = walk_provider(start["Location"], provider, username, browser=browser)
    assert callback.startswith("http://testserver/oidc/callback/"), callback
    return client.get(path_of(callback))


def test_an_oidc_user_lands_in_the_mapped_roles_and_teams_and_is_refused_the_rest(oidc_login, rules):
    rules(("oidc", "Payments-Devs", "developer", "payments"), ("oidc", "auditors", "auditor", None),
          ("ldap", "payments-devs", "admin", None))  # an LDAP rule does not apply to OIDC users
    name = unique("ola")
    sub = oidc_login.put_user(name, groups=["payments-devs", "unmapped"])
    client = Client()

    start = client.get("/oidc/authenticate/")
    query = parse_qs(urlsplit(start["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43  # PKCE
    assert query["response_type"] == ["code"] and query["state"] and query["nonce"]

    landed = _oidc_login(client, oidc_login, name)
    assert (landed.status_code, landed["Location"]) == (302, "/clusters/")
    user = User.objects.get(username=name)
    assert client.session["_auth_user_id"] == str(user.pk)
    assert (roles_of(user), list(user.teams.values_list("name", flat=True))) == ({"developer"}, ["payments"])
    assert not user.has_usable_password() and user.email == f"{name}@example.com"
    assert ExternalIdentity.objects.get(user=user).subject == sub

    assert client.get("/api/v1/clusters/").status_code == 200
    assert client.post("/api/v1/clusters/", {"name": "c1"}, content_type="application/json").status_code == 403
    assert client.get("/security/lockouts/").status_code == 403
    synced = AuditRecord.objects.get(action="user.sso_sync", object_id=str(user.pk))
    assert (synced.actor_name, synced.after["roles"], synced.after["source"]) == ("system:sso", ["developer"], "oidc")
    assert synced.after["directory_groups"] == ["payments-devs", "unmapped"]


def test_a_group_removed_at_the_provider_removes_the_role_at_the_next_login_and_at_the_recheck(oidc_login, rules):
    rules(("oidc", "payments-devs", "developer", "payments"), ("oidc", "approvers", "approver", None))
    name = unique("pia")
    oidc_login.put_user(name, groups=["payments-devs", "approvers"])
    browser = httpx.Client(timeout=10)  # one person's browser at the provider (its session persists)
    _oidc_login(Client(), oidc_login, name, browser=browser)
    user = User.objects.get(username=name)
    assert roles_of(user) == {"developer", "approver"}

    oidc_login.put_user(name, groups=["payments-devs"])
    client = Client()
    _oidc_login(client, oidc_login, name, browser=browser)  # signed in at the provider already: no password asked
    assert roles_of(user) == {"developer"}
    assert AuditRecord.objects.filter(action="user.sso_sync", object_id=str(user.pk)).latest("id").before["roles"] == [
        "approver", "developer"]

    # the session is checked with the provider again once SWITCHYARD_OIDC_RECHECK_SECONDS have passed
    oidc_login.put_user(name, groups=[])
    session = client.session
    session["oidc_id_token_expiration"] = 0
    session.save()
    recheck = client.get("/clusters/")
    assert recheck.status_code == 302 and "prompt=none" in recheck["Location"]
    back = walk_provider(recheck["Location"], oidc_login, name, browser=browser)
    assert client.get(path_of(back))["Location"] == "/clusters/"
    assert roles_of(user) == set() and not user.teams.exists()
    assert client.get("/clusters/").status_code == 403  # no role: no clusters page


def test_logout_ends_the_session_at_the_provider_too(oidc_login, rules):
    name = unique("quin")
    oidc_login.put_user(name, groups=[])
    browser = httpx.Client(timeout=10)
    client = Client()
    _oidc_login(client, oidc_login, name, browser=browser)
    id_token = client.session["oidc_id_token"]

    out = client.post("/logout/")
    assert "_auth_user_id" not in client.session
    assert out["Location"].startswith(oidc_login.issuer + "/logout/")
    assert parse_qs(urlsplit(out["Location"]).query)["id_token_hint"] == [id_token]
    assert walk_provider(out["Location"], oidc_login, name, browser=browser) == "http://testserver/login/"
    # the provider's session ended: a new login asks for the password again
    again = browser.get(Client().get("/oidc/authenticate/")["Location"])
    assert again.status_code == 302 and "/accounts/login/" in again.headers["Location"]


def test_an_id_token_of_another_issuer_and_a_local_account_name_are_refused(oidc_login, settings, make_user):
    name = unique("rex")
    oidc_login.put_user(name, groups=[])
    settings.SWITCHYARD_OIDC_ISSUER = "https://login.example.com/other"
    client = Client()
    assert _oidc_login(client, oidc_login, name)["Location"] == "/login/?sso=failed"
    assert "_auth_user_id" not in client.session and not User.objects.filter(username=name).exists()

    settings.SWITCHYARD_OIDC_ISSUER = oidc_login.issuer
    make_user(name, "admin")  # a local admin of the same name
    failed = _oidc_login(client, oidc_login, name)
    assert failed["Location"] == "/login/?sso=failed" and "_auth_user_id" not in client.session
    page = client.get(failed["Location"]).content.decode()
    assert "a local account has that username" in page and "Single sign-on did not log you in" in page
    assert not ExternalIdentity.objects.exists()


def test_the_login_page_offers_oidc_beside_the_password_form_and_alone_when_password_login_is_off(oidc_login,
                                                                                                  settings):
    page = Client().get("/login/").content.decode()
    assert "Log in with Test IdP" in page and 'data-testid="password-login"' in page
    settings.SWITCHYARD_LOCAL_LOGIN = False
    page = Client().get("/login/").content.decode()
    assert "Log in with Test IdP" in page and 'data-testid="password-login"' not in page
    assert Client().post("/login/", {"username": "x", "password": PASSWORD}).status_code == 403


def test_oidc_discover_prints_the_endpoint_variables_of_the_provider(oidc_provider, capsys):
    call_command("oidc_discover", oidc_provider.issuer)
    printed = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    expected = oidc_provider.control_plane_environment()
    for name in ("SWITCHYARD_OIDC_ISSUER", "SWITCHYARD_OIDC_AUTHORIZATION_ENDPOINT", "SWITCHYARD_OIDC_TOKEN_ENDPOINT",
                 "SWITCHYARD_OIDC_USERINFO_ENDPOINT", "SWITCHYARD_OIDC_JWKS_ENDPOINT",
                 "SWITCHYARD_OIDC_END_SESSION_ENDPOINT"):
        assert printed[name] == expected[name]
