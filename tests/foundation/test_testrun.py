"""`./dev test` runs some tests beside the others (devstack/testrun.py): a test there may not use the test database,
which the other process creates and flushes."""

import os
import subprocess
import sys
from pathlib import Path

from devstack.services import Ports
from devstack.testrun import BESIDE, main_args, sides

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


def _collected(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                             *args], cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, text=True)


def _ids(proc: subprocess.Popen) -> list[str]:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-2000:]
    return [line for line in out.splitlines() if "::" in line]


def test_the_three_processes_together_run_every_test_once():
    """The main process (the suite without BESIDE and SECOND), BESIDE and SECOND: every test of the suite in
    exactly one of them."""
    others = {side.name: side for side in sides({"SWITCHYARD_REDIS_URL": "redis://127.0.0.1:1/0"}, Ports(28400))}
    whole = _collected("tests")
    main = _collected("tests", *main_args(list(others.values())))
    beside = _collected(*others["beside"].pytest_args(), env={"SWITCHYARD_TEST_BESIDE": "1"})
    second = _collected(*others["second"].pytest_args())
    every, parts = _ids(whole), [_ids(main), _ids(beside), _ids(second)]
    assert all(parts)
    assert sorted(every) == sorted(test for part in parts for test in part)


def test_the_second_process_has_a_database_a_celery_queue_and_broker_ports_of_its_own():
    env = {"SWITCHYARD_DB_NAME": "switchyard", "SWITCHYARD_REDIS_URL": "redis://127.0.0.1:28401/0"}
    ports = Ports(28400)
    by_name = {side.name: side for side in sides(env, ports)}
    second, beside = by_name["second"].env, by_name["beside"].env
    assert second["SWITCHYARD_DB_NAME"] == "switchyard_second"
    assert second["SWITCHYARD_REDIS_URL"] == "redis://127.0.0.1:28401/2"
    assert beside["SWITCHYARD_DB_NAME"] == "switchyard" and "SWITCHYARD_TEST_BESIDE" not in second
    main_ports = range(28400 + 300, 28400 + 390)  # tests/broker/conftest.py's default
    ranges = [main_ports, *(range(int(s.env["SWITCHYARD_TEST_BROKER_PORTS"]), int(s.env["SWITCHYARD_TEST_BROKER_PORTS"]) + 90)
                            for s in by_name.values())]
    assert all(set(a).isdisjoint(b) for i, a in enumerate(ranges) for b in ranges[i + 1:])
