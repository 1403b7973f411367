"""`./dev test` runs some tests beside the others (devstack/testrun.py): a test there may not use the test database,
which the other process creates and flushes."""

import os
import subprocess
import sys
from pathlib import Path

from devstack.testrun import BESIDE

ROOT = Path(__file__).resolve().parents[2]


def collect_beside(*paths: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWITCHYARD_TEST_BESIDE": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           *paths], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_test_using_the_database_is_refused_beside_the_others_and_named():
    result = collect_beside("tests/governance/test_policy.py")
    assert result.returncode == 4, result.stdout + result.stderr  # pytest's usage error: nothing ran
    assert "tests/governance/test_policy.py::test_the_same_body_passes_on_a_fitting_cluster (db" in result.stderr


def test_what_runs_beside_the_others_uses_no_database():
    result = collect_beside(*BESIDE)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert " tests collected" in result.stdout
