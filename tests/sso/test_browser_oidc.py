"""Real browser: a person clicks "Log in with Test IdP", signs in at the OpenID provider, lands in Switchyard with
the role its group maps to (and no more), and logging out ends the provider's session too."""

import pytest

from tests.sso.servers import PASSWORD, unique

pytestmark = pytest.mark.django_db(transaction=True)


def test_oidc_login_and_logout_in_a_real_browser(live_server, page, oidc_login, rules):
    rules(("oidc", "platform-sre", "sre", "platform"))
    name = unique("sam")
    oidc_login.put_user(name, groups=["platform-sre"])

    page.goto(f"{live_server.url}/clusters/")
    page.click("[data-testid=oidc-login]")
    page.wait_for_url(lambda url: url.startswith(oidc_login.url + "/accounts/login/"))
    page.fill("#id_username", name)
    page.fill("#id_password", PASSWORD)
    page.click("#provider-login")
    page.wait_for_url(f"{live_server.url}/clusters/")  # back where the person was going
    assert page.locator("[data-testid=whoami]").inner_text() == f"{name} · SRE"
    assert page.locator("[data-testid=nav-sso]").count() == 0
    assert page.goto(f"{live_server.url}/security/sso/").status == 403

    page.goto(f"{live_server.url}/")
    page.click("header .who button[type=submit]")  # Log out
    page.wait_for_url(f"{live_server.url}/login/")
    page.click("[data-testid=oidc-login]")  # the provider's session ended: it asks for the password again
    page.wait_for_selector("#provider-login")
