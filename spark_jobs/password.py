"""The index job's PostgreSQL password: from a file only its owner may read, never from the command line.

The job runs in its own process (and on a cluster, on other machines), so it reads the password itself:
`SWITCHYARD_JDBC_PASSWORD_FILE` names a mode-600 file holding it (the Celery task writes one for the job's
life, apps/tracing/runner.py). A file other users may read is refused with the command that fixes it. The
control plane reads its own secrets with broker_core.secret_source; the job keeps its own few lines, so that
spark_jobs needs nothing of broker_core but the trace schema.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

PASSWORD_FILE = "SWITCHYARD_JDBC_PASSWORD_FILE"


class PasswordFileError(RuntimeError):
    pass


def jdbc_password(environ: Mapping[str, str] | None = None) -> str | None:
    """The password in the file SWITCHYARD_JDBC_PASSWORD_FILE names (None when the variable is not set: a
    database that needs none)."""
    path = (os.environ if environ is None else environ).get(PASSWORD_FILE)
    return read_password_file(Path(path)) if path else None


def read_password_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise PasswordFileError(f"{PASSWORD_FILE}: cannot read {path} ({exc.strerror}); create it with mode 600") \
            from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PasswordFileError(f"{PASSWORD_FILE}: {path} may be read by other users; run `chmod 600 {path}`")
    value = path.read_text().strip()
    if not value:
        raise PasswordFileError(f"{PASSWORD_FILE}: {path} is empty")
    return value
