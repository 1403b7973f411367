"""Where a secret comes from: an environment variable, or a file the variable `<NAME>_FILE` names.

Never argv (`ps` shows every process's command line to every user). A file must be readable by its
owner only, so a secret left world-readable is refused with a message saying how to fix it. The
control plane's settings, the broker and the stack scripts all read secrets through `read_secret`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path


class SecretSourceError(RuntimeError):
    pass


def read_secret(name: str, environ: Mapping[str, str] | None = None, default: str | None = None) -> str | None:
    """The value of `name` in the environment, else the stripped contents of the file `<name>_FILE` names,
    else `default`."""
    env = os.environ if environ is None else environ
    value = env.get(name)
    if value:
        return value
    path = env.get(f"{name}_FILE")
    if path:
        return read_secret_file(Path(path), what=f"{name}_FILE")
    return default


def read_secret_file(path: Path, what: str = "secret file") -> str:
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise SecretSourceError(f"{what}: cannot read {path} ({exc.strerror}); create it with mode 600") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretSourceError(f"{what}: {path} may be read by other users; run `chmod 600 {path}`")
    value = path.read_text().strip()
    if not value:
        raise SecretSourceError(f"{what}: {path} is empty")
    return value


def write_secret_file(path: Path, value: str) -> None:
    """Write value to path readable by its owner only (created with mode 600, never briefly wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    os.chmod(path, 0o600)
