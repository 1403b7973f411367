"""Run one index build: the Spark job in its own process, its progress lines copied onto the IndexRun.

The job runs as `python -m spark_jobs.trace_index` (its own JVM, not inside the Celery worker) and
prints one JSON object per step on stdout; Spark's own log goes to <state>/logs/trace-index-<run>.log.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.tracing.choices import RunState
from apps.tracing.models import IndexRun
from broker_core.secret_source import write_secret_file

log = logging.getLogger("apps.tracing.runner")
ROOT = Path(__file__).resolve().parents[2]


def jdbc_url() -> str:
    """The database this process uses (the test database under pytest), as a JDBC URL with the user and without
    the password: the URL goes on the job's command line, where `ps` shows it."""
    db = connection.settings_dict
    return f"jdbc:postgresql://{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}?user={db['USER']}"


def jdbc_password() -> str | None:
    return connection.settings_dict.get("PASSWORD") or None


def job_command(full: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "spark_jobs.trace_index",
           "--input", *settings.SWITCHYARD_TRACE_INPUTS,
           "--output", settings.SWITCHYARD_TRACE_INDEX_DIR,
           "--master", settings.SWITCHYARD_SPARK_MASTER,
           "--jdbc-url", jdbc_url()]
    return cmd + (["--full"] if full else [])


@contextmanager
def job_environment() -> Iterator[dict[str, str]]:
    """The job's environment: the database password in a file only this user can read, for the job's life
    (SWITCHYARD_JDBC_PASSWORD_FILE), never in its argv or environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_JDBC_PASSWORD")}
    env["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    password = jdbc_password()
    with tempfile.TemporaryDirectory(prefix="switchyard-jdbc-") as folder:  # mode 700
        if password:
            path = Path(folder) / "password"
            write_secret_file(path, password)
            env["SWITCHYARD_JDBC_PASSWORD_FILE"] = str(path)
        yield env


def run_index_build(run_id: int) -> IndexRun:
    run = IndexRun.objects.get(pk=run_id)
    if run.state != RunState.QUEUED:
        log.info("index run not queued; nothing to do", extra={"run_id": run_id, "state": run.state})
        return run
    for folder in settings.SWITCHYARD_TRACE_INPUTS:
        Path(folder).mkdir(parents=True, exist_ok=True)
    logs = Path(settings.STATE_DIR) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    _update(run, state=RunState.RUNNING, started_at=timezone.now(), stage="starting Spark", percent=1)
    log.info("index run started", extra={"run_id": run.pk, "command": job_command()})
    last: dict = {}
    with open(logs / f"trace-index-{run.pk}.log", "ab") as spark_log, job_environment() as env:
        proc = subprocess.Popen(job_command(), stdout=subprocess.PIPE, stderr=spark_log, cwd=ROOT, text=True, env=env)
        for line in proc.stdout:
            try:
                step = json.loads(line)
            except ValueError:
                continue
            if not isinstance(step, dict) or "stage" not in step:
                continue
            last = step
            run.steps = [*run.steps, {**step, "at": timezone.now().isoformat()}]
            _update(run, stage=step["stage"][:200], percent=min(int(step.get("percent", 0)), 99), steps=run.steps)
        code = proc.wait()
    if code == 0:
        _update(run, state=RunState.SUCCEEDED, percent=100, finished_at=timezone.now(),
                stage="nothing new to index" if last.get("new_files") == 0 else "done",
                new_files=last.get("new_files", 0), new_events=last.get("new_events", 0),
                messages=last.get("messages", 0))
        log.info("index run succeeded", extra={"run_id": run.pk, **{k: v for k, v in last.items() if k != "stage"}})
    else:
        error = last.get("error") or f"the index job exited with code {code}; see {spark_log.name}"
        _update(run, state=RunState.FAILED, finished_at=timezone.now(), error=error, stage="failed")
        log.error("index run failed", extra={"run_id": run.pk, "error": error})
    return run


def _update(run: IndexRun, **fields) -> None:
    for key, value in fields.items():
        setattr(run, key, value)
    IndexRun.objects.filter(pk=run.pk).update(**fields)
