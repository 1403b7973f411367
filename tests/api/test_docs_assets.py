"""Swagger UI and ReDoc come from the pinned drf-spectacular-sidecar assets, served by the control plane
itself: in a real browser that may reach nothing but the control plane, both render the API."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def offline_page(page, live_server):
    """The page, with every request to another host than the live server refused (recorded)."""
    own = urlsplit(live_server.url).netloc
    elsewhere: list[str] = []

    def route(r):
        if urlsplit(r.request.url).netloc == own:
            r.continue_()
        else:
            elsewhere.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.elsewhere = elsewhere
    return page


def test_swagger_ui_and_redoc_render_without_internet(offline_page, live_server, make_user):
    page = offline_page
    make_user("dev-docs", "developer", team="payments")
    login(page, live_server.url, "dev-docs")

    page.goto(f"{live_server.url}/api/v1/docs/")
    html = page.content()
    assert "cdn.jsdelivr" not in html and "@latest" not in html
    page.wait_for_selector(".swagger-ui .opblock", timeout=30000)  # the operations, rendered from the schema
    # Swagger UI renders a long schema's operations near the viewport only: the first ones, then, scrolled to
    # the end, the last tag's
    assert page.locator(".swagger-ui .opblock").count() >= 5
    page.mouse.wheel(0, 1_000_000)
    page.locator(".swagger-ui .opblock", has_text="/api/v1/tx/").first.wait_for(timeout=30000)
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("Switchyard API")

    page.goto(f"{live_server.url}/api/v1/redoc/")
    page.wait_for_selector("[data-section-id^='operation/']", state="attached", timeout=30000)
    assert "Switchyard API" in page.locator("h1").first.inner_text()
    assert page.elsewhere == []
