"""Fixtures shared by every test: users with roles, API clients, ZooKeeper chroots, the browser."""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop

TEST_PASSWORD = "pw-for-tests-1"


@pytest.fixture
def make_user(db):
    """make_user("sre-1", "sre", team="payments") → a user holding that role (and team membership)."""
    from django.contrib.auth.models import Group, User

    from apps.accounts.models import Team
    from apps.accounts.roles import sync_role_groups

    sync_role_groups()

    def make(username: str, *roles: str, team: str | None = None, superuser: bool = False):
        user = User.objects.create_user(username=username, password=TEST_PASSWORD, is_superuser=superuser,
                                        is_staff=superuser)
        user.groups.set(Group.objects.filter(name__in=roles))
        if team:
            team_obj, _ = Team.objects.get_or_create(name=team, defaults={"display_name": team.title()})
            team_obj.members.add(user)
        return user

    return make


@pytest.fixture
def api_for():
    """api_for(user) → a DRF APIClient authenticated with that user's token (None: anonymous)."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    def make(user=None):
        client = APIClient()
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


@pytest.fixture(scope="session")
def zk_connect():
    from tests.support.stack import zk_connect as connect

    return connect()


@pytest.fixture
def zk_chroot(zk_connect):
    """A fresh chroot per test so tests never see each other's znodes; removed afterwards."""
    from kazoo.client import KazooClient

    chroot = f"/test-{uuid.uuid4().hex[:12]}"
    yield chroot
    client = KazooClient(hosts=zk_connect, timeout=5)
    client.start(timeout=5)
    try:
        client.delete(chroot, recursive=True)
    except Exception:
        pass
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def browser_context():
    from playwright.sync_api import sync_playwright

    from tests.support.browser import launch

    with sync_playwright() as playwright:
        context = launch(playwright)
        yield context
        context.close()


@pytest.fixture
def page(browser_context):
    page = browser_context.new_page()
    page.set_default_timeout(15000)
    yield page
    browser_context.clear_cookies()
    page.close()
