"""Real browser: an SRE creates a cluster through the form (one rejected try first); a developer is refused."""

import pytest

from apps.audit.models import AuditRecord
from apps.clusters.models import Cluster
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def test_sre_creates_cluster_through_the_form(live_server, page, make_user):
    make_user("sre-web", "sre")
    login(page, live_server.url, "sre-web")
    page.goto(f"{live_server.url}/clusters/")
    page.click("[data-testid=new-cluster]")
    page.fill("#id_name", "web-east")
    page.select_option("#id_environment", "prod")
    page.fill("#id_region", "us-east")
    page.fill("#id_zk_connect", "not a connect string")
    page.fill("#id_zk_chroot", "/switchyard/web-east")
    page.click("main button[type=submit]")

    error = page.locator("[data-testid=error-zk_connect]")
    assert "host:port pairs" in error.inner_text()
    assert Cluster.objects.count() == 0 and AuditRecord.objects.count() == 0

    page.fill("#id_zk_connect", "127.0.0.1:1")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/clusters/web-east/")
    assert page.locator("h1").inner_text() == "Cluster web-east"
    # the page read ZooKeeper live: nothing listens on port 1
    assert page.locator("[data-testid=zk-status]").inner_text() == "unreachable"
    cluster = Cluster.objects.get(name="web-east")
    assert cluster.environment == "prod"
    record = AuditRecord.objects.get()
    assert (record.action, record.source) == ("cluster.create", "web")


def test_developer_is_refused_the_cluster_form(live_server, page, make_user):
    make_user("dev-web", "developer", team="payments")
    login(page, live_server.url, "dev-web")
    page.goto(f"{live_server.url}/clusters/")
    assert page.locator("[data-testid=new-cluster]").count() == 0
    response = page.goto(f"{live_server.url}/clusters/new/")
    assert response.status == 403
    assert "may not" in page.locator("[data-testid=forbidden]").inner_text() or \
        "not allow" in page.locator("[data-testid=forbidden]").inner_text()
    assert page.locator("#id_name").count() == 0


def test_login_rejects_a_wrong_password_and_logout_ends_the_session(live_server, page, make_user):
    make_user("sre-web", "sre")
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "sre-web")
    page.fill("#id_password", "wrong")
    page.click("main button[type=submit]")
    assert "correct username and password" in page.locator(".errorlist").inner_text()
    login(page, live_server.url, "sre-web")
    assert "sre-web" in page.locator("[data-testid=whoami]").inner_text()
    page.click("text=Log out")
    page.goto(f"{live_server.url}/clusters/")
    assert "/login/" in page.url
