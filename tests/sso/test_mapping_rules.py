"""The SSO group-mapping rules: admins edit them through REST and the web page (audited), auditors read them,
everyone else is refused; bad input gets field errors and changes nothing; OIDC settings fail closed."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from apps.accounts.models import SsoGroupMapping, Team
from apps.audit.models import AuditRecord
from broker_core.secret_source import write_secret_file
from control_plane.sso_settings import ldap_settings, oidc_settings

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(make_user, fast_password_checks):
    Team.objects.create(name="payments", display_name="Payments")
    return {"admin": make_user("root-1", "admin", superuser=True), "auditor": make_user("audit-1", "auditor"),
            "dev": make_user("dev-1", "developer"), "approver": make_user("appr-1", "approver")}


def test_an_admin_creates_changes_and_deletes_rules_through_rest_each_audited(people, api_for):
    api = api_for(people["admin"])
    made = api.post("/api/v1/sso-mappings/", {"source": "oidc", "group": "Payments-Devs", "role": "developer",
                                              "team": "payments"}, format="json")
    assert made.status_code == 201, made.json()
    rule_id = made.json()["id"]
    assert made.json() | {"created_at": None} == {"id": rule_id, "source": "oidc", "group": "Payments-Devs",
                                                  "role": "developer", "team": "payments", "created_at": None}
    changed = api.patch(f"/api/v1/sso-mappings/{rule_id}/", {"role": "approver"}, format="json")
    assert changed.status_code == 200 and changed.json()["role"] == "approver"
    assert api.get("/api/v1/sso-mappings/?source=oidc").json()["count"] == 1
    assert api.delete(f"/api/v1/sso-mappings/{rule_id}/").status_code == 204
    assert not SsoGroupMapping.objects.exists()
    records = list(AuditRecord.objects.filter(action__startswith="sso_mapping.").order_by("id")
                   .values_list("action", "actor_name", "source"))
    assert records == [("sso_mapping.create", "root-1", "api"), ("sso_mapping.update", "root-1", "api"),
                       ("sso_mapping.delete", "root-1", "api")]
    update = AuditRecord.objects.get(action="sso_mapping.update")
    assert (update.before["role"], update.after["role"]) == ("developer", "approver")


@pytest.mark.parametrize("body, field", [
    ({"source": "oidc", "group": "g1"}, "role"),  # neither a role nor a team
    ({"source": "oidc", "group": "g1", "role": "root"}, "role"),
    ({"source": "saml", "group": "g1", "role": "sre"}, "source"),
    ({"source": "ldap", "group": "  ", "role": "sre"}, "group"),
    ({"source": "ldap", "group": "g1", "team": "no-such-team"}, "team"),
    ({"source": "ldap", "group": "G1", "role": "sre"}, "group"),  # the same rule as the one made below
])
def test_bad_rules_get_field_errors_and_change_nothing(people, api_for, body, field):
    api = api_for(people["admin"])
    assert api.post("/api/v1/sso-mappings/", {"source": "ldap", "group": "g1", "role": "sre"},
                    format="json").status_code == 201
    answer = api.post("/api/v1/sso-mappings/", body, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.json()
    assert SsoGroupMapping.objects.count() == 1


def test_only_admins_write_rules_and_auditors_read_them(people, api_for, client):
    rule = {"source": "ldap", "group": "g1", "role": "admin"}
    for name in ("auditor", "dev", "approver"):
        assert api_for(people[name]).post("/api/v1/sso-mappings/", rule, format="json").status_code == 403
    assert api_for(people["auditor"]).get("/api/v1/sso-mappings/").status_code == 200
    assert api_for(people["dev"]).get("/api/v1/sso-mappings/").status_code == 403
    assert api_for(None).get("/api/v1/sso-mappings/").status_code == 401
    client.force_login(people["auditor"])
    page = client.get("/security/sso/")
    assert page.status_code == 200 and 'data-testid="sso-mapping-form"' not in page.content.decode()
    assert client.post("/security/sso/", {"source": "ldap", "group": "g1", "role": "admin"}).status_code == 403
    client.force_login(people["dev"])
    assert client.get("/security/sso/").status_code == 403
    assert not SsoGroupMapping.objects.exists()


def test_an_admin_adds_and_removes_a_rule_on_the_web_page(people, client):
    client.force_login(people["admin"])
    bad = client.post("/security/sso/", {"source": "oidc", "group": "g1"})
    assert bad.status_code == 200 and "A rule gives a role, a team, or both" in bad.content.decode()
    added = client.post("/security/sso/", {"source": "oidc", "group": "platform-sre", "role": "sre",
                                           "team": "payments"})
    assert added.status_code == 302
    rule = SsoGroupMapping.objects.get()
    assert (rule.group, rule.role, rule.team.name) == ("platform-sre", "sre", "payments")
    assert "platform-sre" in client.get("/security/sso/").content.decode()
    assert client.post(f"/security/sso/{rule.pk}/delete/").status_code == 302
    assert not SsoGroupMapping.objects.exists()
    assert list(AuditRecord.objects.filter(action__startswith="sso_mapping.").values_list("action", "source")) == [
        ("sso_mapping.create", "web"), ("sso_mapping.delete", "web")]


def test_oidc_settings_fail_closed_and_take_the_client_secret_from_a_file(tmp_path):
    assert oidc_settings({})["SWITCHYARD_OIDC_ENABLED"] is False
    assert ldap_settings({})["SWITCHYARD_LDAP_ENABLED"] is False
    with pytest.raises(ImproperlyConfigured, match="SWITCHYARD_OIDC_TOKEN_ENDPOINT.*oidc_discover"):
        oidc_settings({"SWITCHYARD_OIDC_CLIENT_ID": "sy", "SWITCHYARD_OIDC_ISSUER": "https://idp",
                       "SWITCHYARD_OIDC_AUTHORIZATION_ENDPOINT": "https://idp/auth",
                       "SWITCHYARD_OIDC_USERINFO_ENDPOINT": "https://idp/userinfo",
                       "SWITCHYARD_OIDC_JWKS_ENDPOINT": "https://idp/jwks"})
    env = {"SWITCHYARD_OIDC_CLIENT_ID": "sy", "SWITCHYARD_OIDC_ISSUER": "https://idp",
           **{f"SWITCHYARD_OIDC_{name}_ENDPOINT": f"https://idp/{name.lower()}"
              for name in ("AUTHORIZATION", "TOKEN", "USERINFO", "JWKS")}}
    with pytest.raises(ImproperlyConfigured, match="SWITCHYARD_OIDC_CLIENT_SECRET_FILE"):
        oidc_settings(env)
    secret = tmp_path / "client-secret"
    write_secret_file(secret, "s3cret-value")
    configured = oidc_settings({**env, "SWITCHYARD_OIDC_CLIENT_SECRET_FILE": str(secret)})
    assert configured["OIDC_RP_CLIENT_SECRET"] == "s3cret-value" and configured["OIDC_USE_PKCE"] is True
    with pytest.raises(ImproperlyConfigured, match="SWITCHYARD_LDAP_USER_SEARCH_BASE"):
        ldap_settings({"SWITCHYARD_LDAP_SERVER_URI": "ldap://127.0.0.1:1"})


def test_an_sso_user_gets_no_password_from_an_admin_and_rules_match_groups_without_case(people, rules):
    from django.core.exceptions import ValidationError

    from apps.accounts import actions, sso_actions
    from apps.accounts.roles import roles_of

    rules(("oidc", "Platform-SRE", "sre", "payments"))
    person = sso_actions.DirectoryUser(source="oidc", subject="sub-1", username="ivy", groups=("platform-sre",))
    user = sso_actions.sign_in(person=person)
    assert roles_of(user) == {"sre"} and list(user.teams.values_list("name", flat=True)) == ["payments"]
    with pytest.raises(ValidationError, match="single sign-on user has no password"):
        actions.update_user(actor=people["admin"], user=user, password="a-long-password-1")
    user.refresh_from_db()
    assert not user.has_usable_password()
