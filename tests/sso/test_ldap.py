"""LDAP login against a real OpenLDAP (slapd, over StartTLS): a directory user lands in the roles and teams its
groups map to and is refused the rest; leaving a group removes the role at the next login or sync; the periodic
sync deactivates a user the directory disabled, and that user's API token stops working."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django_celery_beat.models import PeriodicTask

from apps.accounts.ldap_login import DirectoryUnreachable
from apps.accounts.models import ApiToken, ExternalIdentity
from apps.accounts.roles import roles_of
from apps.accounts.tasks import sync_ldap_users
from apps.audit.models import AuditRecord
from tests.conftest import TEST_PASSWORD
from tests.sso.servers import PASSWORD, unique
from tests.support.tokens import token_for

pytestmark = pytest.mark.django_db


def _login(username: str, password: str = PASSWORD) -> Client:
    client = Client()
    answer = client.post("/login/", {"username": username, "password": password})
    assert answer.status_code == 302, answer.content.decode()[:500]
    return client


def _teams(user) -> list[str]:
    return sorted(user.teams.values_list("name", flat=True))


def test_a_directory_user_lands_in_the_mapped_roles_and_teams_and_is_refused_the_rest(ldap_login, directory_admin,
                                                                                       rules):
    rules(("ldap", "payments-devs", "developer", "payments"), ("ldap", "sre-oncall", "sre", None),
          ("oidc", "payments-devs", "admin", None))  # an OIDC rule does not apply to LDAP users
    uid = unique("ana")
    directory_admin.add_user(uid, groups=["payments-devs"])

    assert Client().post("/login/", {"username": uid, "password": "wrong"}).status_code == 200
    assert not User.objects.filter(username=uid).exists()

    client = _login(uid.upper())  # the directory matches the username without case; Switchyard keeps it lowercase
    user = User.objects.get(username=uid)
    assert (roles_of(user), _teams(user)) == ({"developer"}, ["payments"])
    assert not user.has_usable_password() and user.email == f"{uid}@example.com"
    identity = ExternalIdentity.objects.get(user=user)
    assert (identity.source, identity.subject) == ("ldap", uid)
    assert "payments-devs" in identity.groups and "cn=payments-devs,ou=groups,dc=switchyard,dc=test" in identity.groups

    assert client.get("/api/v1/clusters/").status_code == 200  # a developer reads clusters
    assert client.post("/api/v1/clusters/", {"name": "c1"}, content_type="application/json").status_code == 403
    assert client.get("/security/sso/").status_code == 403
    assert client.post("/api/v1/sso-mappings/", {"source": "ldap", "group": "x", "role": "admin"},
                       content_type="application/json").status_code == 403

    created, synced = AuditRecord.objects.filter(object_id=str(user.pk), object_type="auth.user").order_by("id")
    assert (created.action, created.actor_name, created.after["source"]) == ("user.create", "system:sso", "ldap")
    assert (synced.action, synced.actor_name) == ("user.sso_sync", "system:sso")
    assert (synced.before["roles"], synced.after["roles"], synced.after["teams"]) == ([], ["developer"], ["payments"])


def test_leaving_a_group_removes_its_role_and_team_at_the_next_login(ldap_login, directory_admin, rules):
    rules(("ldap", "payments-devs", "developer", "payments"), ("ldap", "sre-oncall", "sre", "platform"))
    uid = unique("ben")
    directory_admin.add_user(uid, groups=["payments-devs", "sre-oncall"])
    _login(uid)
    user = User.objects.get(username=uid)
    assert (roles_of(user), _teams(user)) == ({"developer", "sre"}, ["payments", "platform"])

    directory_admin.remove_from_group(uid, "sre-oncall")
    client = _login(uid)
    assert (roles_of(user), _teams(user)) == ({"developer"}, ["payments"])
    assert client.post("/api/v1/clusters/", {"name": "c1"}, content_type="application/json").status_code == 403
    change = AuditRecord.objects.filter(action="user.sso_sync", object_id=str(user.pk)).latest("id")
    assert (change.before["roles"], change.after["roles"]) == (["developer", "sre"], ["developer"])
    assert (change.before["teams"], change.after["teams"]) == (["payments", "platform"], ["payments"])

    _login(uid)  # nothing changed in the directory: no new record
    assert AuditRecord.objects.filter(action="user.sso_sync", object_id=str(user.pk)).latest("id") == change


def test_the_sync_deactivates_a_disabled_user_revokes_its_tokens_and_remaps_the_others(ldap_login, directory_admin,
                                                                                       rules, api_for):
    rules(("ldap", "payments-devs", "developer", "payments"), ("ldap", "sre-oncall", "sre", None))
    leaver, mover = unique("cleo"), unique("dev")
    directory_admin.add_user(leaver, groups=["payments-devs"])
    directory_admin.add_user(mover, groups=["payments-devs", "sre-oncall"])
    _login(leaver)
    _login(mover)
    secret = token_for(User.objects.get(username=leaver))
    assert api_for(None).get("/api/v1/teams/", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 200

    directory_admin.disable(leaver)
    directory_admin.remove_from_group(mover, "sre-oncall")
    scheduled = PeriodicTask.objects.get(name="Sync LDAP users")  # made by the migration; beat runs it
    assert (scheduled.task, scheduled.interval.every, scheduled.enabled) == (sync_ldap_users.name, 15, True)
    counts = sync_ldap_users.apply().get()  # the periodic task's body, here in the test process
    assert counts == {"synced": 1, "deactivated": 1, "failed": 0}

    gone = User.objects.get(username=leaver)
    assert not gone.is_active and gone.external_identity.deactivated_by_directory
    assert api_for(None).get("/api/v1/teams/", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 401
    assert not ApiToken.objects.filter(user=gone).exists()
    assert roles_of(User.objects.get(username=mover)) == {"developer"}
    assert set(AuditRecord.objects.filter(actor_name="system:sso", action__in=["user.sso_deactivate", "token.revoke"])
               .values_list("action", flat=True)) == {"user.sso_deactivate", "token.revoke"}
    # disabled in the directory: the login is refused too
    assert Client().post("/login/", {"username": leaver, "password": PASSWORD}).status_code == 200


def test_a_sync_that_cannot_reach_the_directory_deactivates_nobody(ldap_login, directory_admin, rules, settings):
    uid = unique("eve")
    directory_admin.add_user(uid)
    _login(uid)
    settings.AUTH_LDAP_SERVER_URI = "ldap://127.0.0.1:9"  # nothing listens there
    with pytest.raises(DirectoryUnreachable, match="did not answer"):
        sync_ldap_users.apply(throw=True, retries=5).get()
    assert User.objects.get(username=uid).is_active


def test_a_directory_user_never_takes_over_a_local_account_of_the_same_name(ldap_login, directory_admin, make_user):
    uid = unique("fay")
    make_user(uid, "developer")
    directory_admin.add_user(uid, password="the-directory-password")
    refused = Client().post("/login/", {"username": uid, "password": "the-directory-password"})
    assert refused.status_code == 200
    assert not ExternalIdentity.objects.exists()
    assert Client().post("/login/", {"username": uid, "password": TEST_PASSWORD}).status_code == 302


def test_with_local_login_off_only_the_directory_logs_people_in(ldap_login, directory_admin, make_user, settings):
    settings.SWITCHYARD_LOCAL_LOGIN = False
    local = unique("gil")
    make_user(local, "developer")
    assert Client().post("/login/", {"username": local, "password": TEST_PASSWORD}).status_code == 200
    assert Client().post("/api/v1/auth/token/", {"username": local, "password": TEST_PASSWORD},
                         content_type="application/json").status_code == 400
    uid = unique("hal")
    directory_admin.add_user(uid)
    _login(uid)
    token = Client().post("/api/v1/auth/token/", {"username": uid, "password": PASSWORD},
                          content_type="application/json")
    assert token.status_code == 200 and token.json()["token"]
