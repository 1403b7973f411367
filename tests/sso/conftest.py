"""Fixtures of the SSO tests: the OpenLDAP server and the OpenID provider (each started once per run, on this
stack's ports under its state folder) and the control plane's settings pointing at them."""

from __future__ import annotations

import pytest

from control_plane.sso_settings import ldap_settings, oidc_settings
from devstack.ldap import start_slapd, stop_slapd
from tests.sso.servers import DirectoryAdmin, start_provider, stop_provider
from tests.support.stack import ports, state_dir


@pytest.fixture(scope="session")
def ldap_directory():
    state = state_dir()
    directory = start_slapd(state, ports().ldap, fresh=True)
    yield directory
    stop_slapd(state)


@pytest.fixture
def directory_admin(ldap_directory):
    admin = DirectoryAdmin(ldap_directory)
    yield admin
    admin.close()


FAST_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", "django.contrib.auth.hashers.PBKDF2PasswordHasher"]


@pytest.fixture
def fast_password_checks(settings):
    """Local users' passwords (make_user), and every login the directory refuses, are hashed by the local
    backend (an unknown name answers as slowly as a known one): with PBKDF2 that is most of a test's time.
    Local passwords made before still verify (PBKDF2 stays in the list)."""
    settings.PASSWORD_HASHERS = FAST_HASHERS


@pytest.fixture
def ldap_login(settings, ldap_directory, fast_password_checks):
    """The control plane logs people in through the test directory, over StartTLS with its CA."""
    env = {**ldap_directory.control_plane_environment(), "SWITCHYARD_LDAP_START_TLS": "1"}
    for name, value in ldap_settings(env).items():
        setattr(settings, name, value)
    return env


@pytest.fixture(scope="session")
def oidc_provider():
    state = state_dir()
    provider = start_provider(state, ports().oidc_provider)
    yield provider
    stop_provider(state)


@pytest.fixture
def oidc_login(settings, oidc_provider, fast_password_checks):
    """The control plane logs people in through the test provider."""
    for name, value in oidc_settings(oidc_provider.control_plane_environment()).items():
        setattr(settings, name, value)
    return oidc_provider


@pytest.fixture
def rules(db):
    """rules(("ldap", "payments-devs", "developer", "payments"), ...): mapping rules made by an admin."""
    from django.contrib.auth.models import User

    from apps.accounts import sso_actions
    from apps.accounts.models import Team
    from apps.accounts.roles import sync_role_groups

    sync_role_groups()
    admin = User.objects.create_superuser("sso-rule-admin", password=None)

    def make(*specs):
        made = []
        for source, group, role, team in specs:
            team_obj = Team.objects.get_or_create(name=team, defaults={"display_name": team.title()})[0] if team else None
            made.append(sso_actions.create_mapping(actor=admin, source=source, group=group, role=role or "",
                                                   team=team_obj))
        return made

    return make
