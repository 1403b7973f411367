"""Fail closed: no start without a secret key outside DEBUG, a production profile that passes check --deploy,
and a 500 that shows no traceback (web page or API)."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client, override_settings

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("SWITCHYARD_SECRET_KEY", "SWITCHYARD_SECRET_KEY_FILE", "SWITCHYARD_DEBUG",
                         "SWITCHYARD_PROFILE", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def test_without_a_secret_key_the_control_plane_refuses_to_start_and_says_how_to_set_one():
    result = _manage("check")
    assert result.returncode != 0
    assert "No secret key" in result.stderr
    assert "SWITCHYARD_SECRET_KEY_FILE" in result.stderr and "SWITCHYARD_SECRET_KEY" in result.stderr


def test_debug_is_off_unless_asked_for_and_only_debug_starts_without_a_key():
    from django.conf import settings

    assert settings.DEBUG is False  # the test process runs with the defaults
    assert _manage("check", SWITCHYARD_DEBUG="1").returncode == 0


def test_a_secret_key_file_readable_by_others_is_refused(tmp_path):
    key = tmp_path / "secret-key"
    key.write_text(secrets.token_urlsafe(48))
    key.chmod(0o644)
    result = _manage("check", SWITCHYARD_SECRET_KEY_FILE=str(key))
    assert result.returncode != 0 and "chmod 600" in result.stderr
    key.chmod(0o600)
    assert _manage("check", SWITCHYARD_SECRET_KEY_FILE=str(key)).returncode == 0


def test_the_production_profile_passes_check_deploy_with_no_security_warning():
    result = _manage("check", "--deploy", SWITCHYARD_PROFILE="production",
                     SWITCHYARD_SECRET_KEY=secrets.token_urlsafe(48))
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "security.W" not in output and "axes." not in output, output


def test_the_development_profile_is_what_check_deploy_warns_about():
    """Without the production profile, check --deploy names what TLS in front would fix (docs/security.md)."""
    result = _manage("check", "--deploy", SWITCHYARD_SECRET_KEY=secrets.token_urlsafe(48))
    output = result.stdout + result.stderr
    assert result.returncode == 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in output


@pytest.mark.django_db
@override_settings(ROOT_URLCONF="tests.security.urls_500")
def test_a_500_shows_no_traceback_on_a_page_or_in_the_api():
    client = Client(raise_request_exception=False)
    page = client.get("/boom/")
    assert page.status_code == 500
    body = page.content.decode()
    assert "Traceback" not in body and "secret-internal-detail" not in body and "RuntimeError" not in body

    api = client.get("/api/v1/boom/")
    assert api.status_code == 500
    assert api["Content-Type"].startswith("application/json")
    assert set(api.json()) == {"detail"}
    assert "secret-internal-detail" not in api.content.decode() and "Traceback" not in api.content.decode()
    assert api["X-Request-ID"] in api.json()["detail"]


def test_the_dev_stack_makes_one_secret_key_per_state_folder_and_passes_only_its_path(tmp_path):
    from devstack import services

    env = services.environment(tmp_path / "stack", services.Ports(29990))
    path = Path(env["SWITCHYARD_SECRET_KEY_FILE"])
    key = path.read_text().strip()
    assert path.stat().st_mode & 0o777 == 0o600 and len(key) >= 50
    assert "SWITCHYARD_SECRET_KEY" not in env and key not in str(env)
    again = services.environment(tmp_path / "stack", services.Ports(29990))
    assert Path(again["SWITCHYARD_SECRET_KEY_FILE"]).read_text().strip() == key  # kept: sessions survive a restart
    other = services.environment(tmp_path / "other", services.Ports(29990))
    assert Path(other["SWITCHYARD_SECRET_KEY_FILE"]).read_text().strip() != key
    assert _manage("check", **{k: v for k, v in env.items() if k.startswith("SWITCHYARD_SECRET")}).returncode == 0
