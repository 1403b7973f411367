"""The index job's database password travels in a mode-600 file for the job's life, never on its command line
or in its environment (issue 16, build 7)."""

import stat
from pathlib import Path

import pytest
from django.db import connection

from apps.tracing.runner import job_command, job_environment
from spark_jobs.pg_load import libpq_dsn


def test_the_command_line_has_no_password_and_the_file_is_private_and_removed():
    password = connection.settings_dict["PASSWORD"]
    assert password, "./dev test gives the test process a database password"
    command = job_command()
    assert not any(password in arg for arg in command)
    assert command[command.index("--jdbc-url") + 1].endswith(f"?user={connection.settings_dict['USER']}")
    with job_environment() as env:
        path = Path(env["SWITCHYARD_JDBC_PASSWORD_FILE"])
        assert path.read_text().strip() == password
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert not any(password in value for value in env.values())
    assert not path.exists()


def test_a_jdbc_url_carrying_a_password_is_refused():
    with pytest.raises(ValueError, match="carries a password: give it apart"):
        libpq_dsn("jdbc:postgresql://127.0.0.1:5432/db?user=app&password=hunter2")
    dsn = libpq_dsn("jdbc:postgresql://127.0.0.1:5432/db?user=app", "it's\\secret")
    assert dsn == "host='127.0.0.1' port='5432' dbname='db' user='app' password='it\\'s\\\\secret'"
