"""How `./dev test` runs pytest: the whole suite as three pytest processes side by side, or what it is given as one.

The whole suite (no arguments) runs in three processes at once, on the same services:
- `BESIDE`: the tests that use no service of the control plane (the broker tests, which start their own broker
  processes on the shared ZooKeeper, the README's own stack, which starts a stack of its own, and a few more that
  need neither the database nor the Celery worker);
- `SECOND`: control-plane tests with a test database, a Celery worker and Celery queue of their own
  (`<database>_second`, Redis database SECOND_REDIS_DB; the cache's keys carry the database's name);
- every other test in the main process.
Most tests wait (for brokers, for the worker, for a delay, for a ZooKeeper session to expire), so the processes
overlap on two cores: the suite takes about the time of the longest rather than the sum. The side processes take
their broker ports from ranges of their own (SWITCHYARD_TEST_BROKER_PORTS, tests/broker/conftest.py); their output
goes to `<state>/logs/pytest-<name>.log` and is printed after the main process's. Any failing fails the run.
`SWITCHYARD_TEST_SERIAL=1` runs the whole suite in one process; arguments (`./dev test tests/broker -x`) always
run as one process, as given.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from devstack.services import Ports

BESIDE = ("tests/broker", "tests/foundation/test_devstack.py", "tests/transactions/test_rollback_retention.py",
          "tests/transactions/test_timing.py", "tests/tracing/test_trace_writer.py", "tests/foundation/test_log_scrub.py",
          "tests/rebalancing/test_plan.py")
# Folders whose tests share nothing with the main process's but the services: each test makes its own ZooKeeper
# chroot and clusters (the alert, single sign-on and index-schedule tests, which use the stack's Prometheus,
# directory and state folder, stay in the main process).
SECOND = ("tests/governance", "tests/moves", "tests/transactions", "tests/integration", "tests/rebalancing")
# the side processes' broker ports: base + 500 .. base + 589 and base + 600 .. base + 689 (the main one's: + 300)
BESIDE_BROKER_PORTS = 500
SECOND_BROKER_PORTS = 600
SECOND_REDIS_DB = 2  # the second process's Celery queue and results (the main one's: 0; the cache: 1)


@dataclass(frozen=True)
class Side:
    name: str
    paths: tuple[str, ...]
    env: dict[str, str]
    ignored: tuple[str, ...] = ()  # files under `paths` another process runs

    def pytest_args(self) -> list[str]:
        return [*self.paths, *(f"--ignore={path}" for path in self.ignored)]


def sides(env: dict[str, str], ports: Ports) -> list[Side]:
    """The processes run beside the main one, each with its environment."""
    redis = urllib.parse.urlsplit(env["SWITCHYARD_REDIS_URL"])
    second_redis = urllib.parse.urlunsplit(redis._replace(path=f"/{SECOND_REDIS_DB}"))
    return [
        # SWITCHYARD_TEST_BESIDE: tests/conftest.py refuses a test here that uses the test database or Celery worker
        Side("beside", BESIDE, {**env, "SWITCHYARD_TEST_BESIDE": "1",
                                "SWITCHYARD_TEST_BROKER_PORTS": str(ports.base + BESIDE_BROKER_PORTS)}),
        Side("second", SECOND, ignored=BESIDE,
             env={**env, "SWITCHYARD_DB_NAME": f"{env.get('SWITCHYARD_DB_NAME', 'switchyard')}_second",
                  "SWITCHYARD_REDIS_URL": second_redis,
                  "SWITCHYARD_TEST_BROKER_PORTS": str(ports.base + SECOND_BROKER_PORTS)}),
    ]


def main_args(others: list[Side]) -> list[str]:
    """The main process's arguments: the suite without what the others run."""
    return [f"--ignore={path}" for side in others for path in side.paths]


def run(pytest_args: list[str], env: dict[str, str], state: Path, ports: Ports, root: Path) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    if pytest_args or os.environ.get("SWITCHYARD_TEST_SERIAL"):
        return subprocess.run([*pytest, *pytest_args], env=env, cwd=root).returncode
    (state / "logs").mkdir(parents=True, exist_ok=True)
    others = sides(env, ports)
    logs = [state / "logs" / f"pytest-{side.name}.log" for side in others]
    for side, log_path in zip(others, logs, strict=True):
        print(f"dev test: {', '.join(side.paths)} run beside the other tests; their output follows theirs "
              f"(and is in {log_path.relative_to(root) if log_path.is_relative_to(root) else log_path})", flush=True)
    running = []
    try:
        for side, log_path in zip(others, logs, strict=True):
            with open(log_path, "w") as log:
                # no cache of its own (pytest's last-failed list is the main process's); temporary folders: pytest
                # numbers each run's and locks them, so runs at once get their own
                running.append(subprocess.Popen([*pytest, "-p", "no:cacheprovider", *side.pytest_args()],
                                                env=side.env, cwd=root, stdout=log, stderr=subprocess.STDOUT))
        main = subprocess.run([*pytest, *main_args(others)], env=env, cwd=root).returncode
    except BaseException:
        for proc in running:
            proc.terminate()
        raise
    finally:
        codes = [proc.wait() for proc in running]
    for side, log_path, code in zip(others, logs, codes, strict=True):
        print(f"\n===== {' '.join(side.paths)} (run beside the tests above) =====", flush=True)
        sys.stdout.write(log_path.read_text(errors="replace"))
        print(f"dev test: the tests of {side.name} exited {code}", flush=True)
    print(f"dev test: the main tests exited {main}", flush=True)
    return main or next((code for code in codes if code), 0)
