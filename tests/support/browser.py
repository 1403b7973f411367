"""Headless Chromium from Debian's package, driven by Playwright (its own browser download cannot work here)."""

from __future__ import annotations

import shutil
import tempfile

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    return path


def launch(playwright):
    user_data = tempfile.mkdtemp(prefix="sy-chromium-")
    return playwright.chromium.launch_persistent_context(
        user_data, executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS,
    )


def login(page, base_url: str, username: str, password: str = "pw-for-tests-1") -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("main button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
