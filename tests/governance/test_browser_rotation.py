"""Real browser: an app whose hash is a legacy PBKDF2 one says so; rotating its secret with a chosen overlap
for the old one; a tampered deadline is refused with a message and changes nothing."""

from __future__ import annotations

import time

import pytest

from apps.audit.models import AuditRecord
from apps.topics.actions import create_app
from apps.topics.models import App
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def test_rotate_with_an_overlap_and_a_tampered_deadline(live_server, page, people):
    app, _ = create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    # a row from before the HMAC scheme: its hash is PBKDF2 (docs/security.md)
    App.objects.filter(pk=app.pk).update(secret_hash="pbkdf2_sha256$60000$0123456789abcdef01234567$" + "A" * 43 + "=")
    login(page, live_server.url, people.consumer.username)

    page.goto(f"{live_server.url}/apps/shipping-worker/")
    assert "rotate the secret" in page.locator("[data-testid=legacy-hash]").inner_text()
    page.evaluate("document.querySelector('[data-testid=old-secret-valid-for] option[value=\"600\"]').value = '-5'")
    page.select_option("[data-testid=old-secret-valid-for]", "-5")
    page.click("[data-testid=rotate]")
    page.wait_for_url(f"{live_server.url}/apps/shipping-worker/")
    assert "Give whole seconds from 0" in page.locator(".messages").inner_text()
    assert App.objects.get().revision == 1 and not AuditRecord.objects.filter(action="app.rotate_secret").exists()

    before = time.time()
    page.select_option("[data-testid=old-secret-valid-for]", "3600")  # the default, named "1 hour"
    page.select_option("[data-testid=old-secret-valid-for]", "86400")
    page.click("[data-testid=rotate]")
    secret = page.locator("[data-testid=secret]").inner_text()
    assert secret.startswith("sy_") and "The old secret keeps working until" in page.locator("main").inner_text()
    app = App.objects.get()
    assert app.revision == 2 and app.previous_secret_hash
    assert before + 86400 - 1 <= app.previous_secret_valid_until.timestamp() <= time.time() + 86400
    page.goto(f"{live_server.url}/apps/shipping-worker/")
    assert page.locator("[data-testid=old-secret-until]").count() == 1
    assert page.locator("[data-testid=legacy-hash]").count() == 0
