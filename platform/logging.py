"""Structured log lines: one JSON object per record, with the action context when there is one, scrubbed of
secrets (broker_core.log_scrub): the values of the secret settings and variables, and what looks like one."""

import json
import logging
import re
from datetime import UTC, datetime

from django.conf import settings

from broker_core.log_scrub import Scrubber, secrets_in_environment

SECRET_SETTING = re.compile(r"(PASSWORD|SECRET|TOKEN|_KEY|_AUTH|CREDENTIALS?)$")
_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def secrets_in_settings() -> set[str]:
    """Database passwords, SECRET_KEY and every string setting named like a secret (tokens, keys, credentials)."""
    found = {db.get("PASSWORD") or "" for db in getattr(settings, "DATABASES", {}).values()}
    for name in dir(settings):
        # names that end like a secret (SECRET_KEY, ..._TOKEN, ..._PASSWORD); not the settings that only name a
        # field, cookie or model (AXES_PASSWORD_FORM_FIELD = "password", CSRF_COOKIE_NAME = "csrftoken")
        if name.isupper() and SECRET_SETTING.search(name):
            value = getattr(settings, name, None)
            if isinstance(value, str):
                found.add(value)
    return found


class StructuredFormatter(logging.Formatter):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scrubber: Scrubber | None = None

    @property
    def scrubber(self) -> Scrubber:
        if self._scrubber is None:  # settings are loaded by the first record, not when logging is configured
            scrubber = Scrubber(secrets_in_environment())
            try:
                scrubber.add(secrets_in_settings())
            except Exception:  # settings not configured (a script using only this formatter)
                pass
            self._scrubber = scrubber
        return self._scrubber

    def format(self, record: logging.LogRecord) -> str:
        scrub = self.scrubber
        out = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": scrub.text(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = scrub.value(value, key)
        if record.exc_info:
            out["exception"] = scrub.text(self.formatException(record.exc_info))
        elif record.stack_info:
            out["stack"] = scrub.text(record.stack_info)
        return json.dumps(out, default=str)
