"""Processes of a stack: started in their own process group with a log and a PID file, stopped by PID file,
and waited for."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from devstack.waiting import wait_for

log = logging.getLogger("devstack")


class ServiceError(RuntimeError):
    pass


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1) -> None:
    wait_for(predicate, timeout, f"{what} to be ready", interval, error=ServiceError)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def stop_pid(pidfile: Path, name: str, timeout: float = 10.0) -> bool:
    """Stop the process recorded in pidfile: SIGTERM to its group, then SIGKILL."""
    pid = read_pid(pidfile)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(pid):
            _reap(pid)
            time.sleep(0.05)
        if not pid_alive(pid):
            break
    pidfile.unlink(missing_ok=True)
    log.info("stopped %s (pid %s)", name, pid)
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def spawn(
    name: str,
    argv: list[str],
    state: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start argv in its own process group, log to state/logs/NAME.log, record its PID."""
    pidfile = state / "pids" / f"{name}.pid"
    existing = read_pid(pidfile)
    if existing:
        log.info("%s already running (pid %s)", name, existing)
        return existing
    (state / "pids").mkdir(parents=True, exist_ok=True)
    (state / "logs").mkdir(parents=True, exist_ok=True)
    logfile = open(state / "logs" / f"{name}.log", "ab")
    proc = subprocess.Popen(
        argv,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        start_new_session=True,
    )
    logfile.close()
    pidfile.write_text(f"{proc.pid}\n")
    log.info("started %s (pid %s)", name, proc.pid)
    return proc.pid
