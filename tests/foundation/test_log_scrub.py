"""Log records are scrubbed of secrets (issue 16, build 7): hand-written records in, scrubbed lines out."""

import json
import logging
import sys

import pytest

from broker_core.log_scrub import REDACTED, Scrubber, ScrubbingFormatter, secrets_in_environment
from control_plane.logging import StructuredFormatter

R = REDACTED


@pytest.mark.parametrize(("line", "expected"), [
    ("connecting to jdbc:postgresql://127.0.0.1:5432/sw?user=app&password=hunter2-xyz&ssl=true",
     f"connecting to jdbc:postgresql://127.0.0.1:5432/sw?user=app&password={R}&ssl=true"),
    ("redis://default:s3cr3t-pw@127.0.0.1:6379/0 is down", f"redis://default:{R}@127.0.0.1:6379/0 is down"),
    ("postgresql://switchyard_app:pa55word@db/switchyard", f"postgresql://switchyard_app:{R}@db/switchyard"),
    ("GET /admin/dlq Authorization: Bearer abc.def-ghi", f"GET /admin/dlq Authorization: Bearer {R}"),
    ("headers={'Authorization': 'Token 9f8e7d6c5b4a'}", f"headers={{'Authorization': 'Token {R}'}}"),
    ('body {"username": "bob", "password": "correct-horse-9"}', f'body {{"username": "bob", "password": "{R}"}}'),
    ("login failed: password=letmein1 for bob", f"login failed: password={R} for bob"),
    ("app orders-svc secret: Zk4p-99xx rotated", f"app orders-svc secret: {R} rotated"),
    ("ALTER ROLE app PASSWORD 'plain-text-pw'", f"ALTER ROLE app PASSWORD '{R}'"),
    ("client_secret=abcdef123456&grant=x", f"client_secret={R}&grant=x"),
    # nothing secret: left as it is
    ("published 3 messages to payments.orders (token bucket refilled)",
     "published 3 messages to payments.orders (token bucket refilled)"),
    ("http://127.0.0.1:27110/login/ answered 200", "http://127.0.0.1:27110/login/ answered 200"),
])
def test_patterns_that_look_like_secrets_are_redacted(line, expected):
    assert Scrubber().text(line) == expected


def test_known_secret_values_are_redacted_wherever_they_appear():
    scrubber = Scrubber(["Xq7-known-db-password", "tok_1234567890", "abc"])  # "abc": too short to redact
    line = "worker: tok_1234567890 used; pw Xq7-known-db-password; abc stays"
    assert scrubber.text(line) == f"worker: {R} used; pw {R}; abc stays"


def test_fields_named_like_secrets_and_nested_values_are_redacted():
    scrubber = Scrubber(["Xq7-known-db-password"])
    assert scrubber.value({"user": "bob", "password": "anything", "api_key": 42, "nested": {"token": "t"},
                           "command": ["spark", "--jdbc-url", "jdbc:postgresql://h/db?password=Xq7-known-db-password"],
                           "count": 3, "ok": True}) == {
        "user": "bob", "password": R, "api_key": R, "nested": {"token": R},
        "command": ["spark", "--jdbc-url", f"jdbc:postgresql://h/db?password={R}"], "count": 3, "ok": True}


def test_secrets_of_the_environment_come_from_variables_and_their_files(tmp_path):
    secret_file = tmp_path / "db-password"
    secret_file.write_text("from-a-file-123\n")
    secret_file.chmod(0o600)
    loose = tmp_path / "loose"
    loose.write_text("world-readable-1\n")
    loose.chmod(0o644)
    env = {"SWITCHYARD_DB_PASSWORD_FILE": str(secret_file), "SWITCHYARD_BROKER_ADMIN_TOKEN": "admin-tok-456",
           "SWITCHYARD_ZK_AUTH_FILE": str(loose), "SWITCHYARD_DB_HOST": "127.0.0.1", "HOME": "/home/x",
           "SWITCHYARD_AUDIT_CHECKPOINT_KEY_FILE": str(tmp_path / "missing")}
    assert secrets_in_environment(env) == {"from-a-file-123", "admin-tok-456"}


def record(msg, *args, exc_info=None, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("apps.test", logging.ERROR, __file__, 1, msg, args, exc_info)
    rec.__dict__.update(extra)
    return rec


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")  # (on purpose: a password to redact)
def test_structured_formatter_redacts_settings_secrets_in_message_fields_and_traceback(settings):
    settings.SWITCHYARD_AUDIT_CHECKPOINT_KEY = "checkpoint-key-value-1"
    # a copy: changing the live dict in place would outlast the test and break every later connection
    settings.DATABASES = {**settings.DATABASES, "default": {**settings.DATABASES["default"], "PASSWORD": "the-db-password-42"}}
    formatter = StructuredFormatter()
    try:
        raise RuntimeError("could not connect with the-db-password-42")
    except RuntimeError:
        exc_info = sys.exc_info()
    line = formatter.format(record("key %s in use", "checkpoint-key-value-1", exc_info=exc_info,
                                   command=["spark", "--jdbc-url", "jdbc:postgresql://h/db?user=a&password=p4ss-word"],
                                   secret="app-secret-shown-once", run_id=7))
    assert "the-db-password-42" not in line and "checkpoint-key-value-1" not in line
    assert "p4ss-word" not in line and "app-secret-shown-once" not in line
    out = json.loads(line)
    assert out["message"] == f"key {R} in use"
    assert out["secret"] == R and out["run_id"] == 7
    assert out["command"][2] == f"jdbc:postgresql://h/db?user=a&password={R}"
    assert f"could not connect with {R}" in out["exception"]


def test_the_brokers_plain_formatter_is_scrubbed_too():
    formatter = ScrubbingFormatter("%(levelname)s %(message)s", scrubber=Scrubber(["admin-token-xyz"]))
    rec = logging.LogRecord("broker_core.http", logging.WARNING, __file__, 1,
                            "refused %s with Authorization: Bearer admin-token-xyz", ("/admin/dlq",), None)
    assert formatter.format(rec) == f"WARNING refused /admin/dlq with Authorization: Bearer {R}"
