"""Scrub secrets out of log records: the values of the secrets this process holds, and what looks like one.

Used by the control plane's StructuredFormatter (platform/logging.py) and the broker's log format
(broker_core/__main__.py). No Django here: the control plane hands in its settings' secrets.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from broker_core.secret_source import SecretSourceError, read_secret_file

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 6  # shorter values would redact ordinary words

# a variable, setting or field named like a secret
SECRET_NAME = re.compile(r"(?i)(passw(or)?d|secret|token|credential|api_?key|private_?key|signing_?key|"
                         r"checkpoint_?key|secret_?key|authorization|cookie|session_?id|dsn|(^|_)auth($|_))")
_WORD = r"(?:passw(?:or)?d|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|client[_-]?secret|app[_-]?secret)"
_DONE = re.escape(REDACTED)  # a value already redacted (a known secret) is left alone
PATTERNS: list[tuple[re.Pattern, str]] = [
    # scheme://user:password@host
    (re.compile(rf"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+):(?!{_DONE})([^\s@/]+)@"), rf"\1:{REDACTED}@"),
    # Authorization: Bearer x / Token x / Basic x (header lines, repr'd header dicts)
    (re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?:(bearer|token|basic|digest)\s+)?[^\s'\",;]+"),
     rf"\1\2 {REDACTED}"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{6,}"), rf"\1 {REDACTED}"),
    # password=x, "password": "x", secret: x, ?password=x&
    (re.compile(rf"(?i)(\b[\w-]*{_WORD}[\w-]*['\"]?\s*[=:]\s*['\"]?)(?!{_DONE})([^\s'\"&;,)}}\]]+)"), rf"\1{REDACTED}"),
    # SQL: PASSWORD 'x'
    (re.compile(r"(?i)(\bpassword\s+)'[^']*'"), rf"\1'{REDACTED}'"),
]


def secrets_in_environment(environ: Mapping[str, str] | None = None) -> set[str]:
    """The secret values this process was given: SWITCHYARD_* (and PG*) variables named like a secret, and the
    contents of the files their `_FILE` variables name."""
    env = os.environ if environ is None else environ
    found = set()
    for name, value in env.items():
        if not (name.startswith("SWITCHYARD_") or name.startswith("PG")) or not value:
            continue
        if name.endswith("_FILE") and SECRET_NAME.search(name[:-5]):
            try:
                found.add(read_secret_file(Path(value), what=name))
            except (SecretSourceError, OSError, UnicodeDecodeError):
                continue
        elif SECRET_NAME.search(name):
            found.add(value)
    return found


class Scrubber:
    """Replaces known secret values, and values in secret-looking places, with "[redacted]"."""

    def __init__(self, known: Iterable[str] = ()):
        self.known: list[str] = []
        self.add(known)

    def add(self, values: Iterable[str]) -> None:
        merged = set(self.known) | {str(v) for v in values if v and len(str(v)) >= MIN_SECRET_LENGTH}
        self.known = sorted(merged, key=len, reverse=True)  # longest first: a secret containing another

    def text(self, text: str) -> str:
        for secret in self.known:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for pattern, replacement in PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def value(self, value, key: str | None = None):
        """A log field: a secret-named key hides its whole value; strings, lists and dicts are scrubbed inside."""
        if key is not None and SECRET_NAME.search(key) and value not in (None, "", True, False):
            return REDACTED
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self.value(v) for v in value]
        if isinstance(value, (int, float, bool)) or value is None:
            return value
        return self.text(str(value))


class ScrubbingFormatter(logging.Formatter):
    """A plain `logging.Formatter` whose output is scrubbed (the broker's log lines)."""

    def __init__(self, *args, scrubber: Scrubber | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.scrubber = scrubber or Scrubber(secrets_in_environment())

    def format(self, record: logging.LogRecord) -> str:
        return self.scrubber.text(super().format(record))


def scrub_root_logger(scrubber: Scrubber | None = None) -> None:
    """Put a ScrubbingFormatter on every handler of the root logger, keeping each one's format."""
    scrubber = scrubber or Scrubber(secrets_in_environment())
    for handler in logging.getLogger().handlers:
        fmt = handler.formatter
        handler.setFormatter(ScrubbingFormatter(fmt._fmt if fmt else None, fmt.datefmt if fmt else None,
                                                scrubber=scrubber))
