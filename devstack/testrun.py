"""How `./dev test` runs pytest: the whole suite as two pytest processes side by side, or what it is given as one.

The whole suite (no arguments) runs in two processes at once, on the same services: the tests that use no
service of the control plane (`BESIDE`: the broker tests, which start their own broker processes on the shared
ZooKeeper, the README's own stack, which starts a stack of its own, and a few more that need neither the database
nor the Celery worker, to even the halves) in one, every other test in the other.
Most of those tests wait (for brokers, for a delay, for a ZooKeeper session to expire), so the two halves overlap
on two cores: the suite takes about the time of the longer half rather than the sum. The side process takes its
broker ports from another range (SWITCHYARD_TEST_BROKER_PORTS, tests/broker/conftest.py); its output goes to
`<state>/logs/pytest-beside.log` and is printed after the main process's. Either failing fails the run.
`SWITCHYARD_TEST_SERIAL=1` runs the whole suite in one process; arguments (`./dev test tests/broker -x`) always
run as one process, as given.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devstack.services import Ports

BESIDE = ("tests/broker", "tests/foundation/test_devstack.py", "tests/transactions/test_rollback_retention.py",
          "tests/transactions/test_timing.py", "tests/tracing/test_trace_writer.py", "tests/foundation/test_log_scrub.py",
          "tests/rebalancing/test_plan.py")
BESIDE_BROKER_PORTS = 500  # the side process's broker ports: base + 500 .. base + 589 (the main one's: + 300)


def run(pytest_args: list[str], env: dict[str, str], state: Path, ports: Ports, root: Path) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    if pytest_args or os.environ.get("SWITCHYARD_TEST_SERIAL"):
        return subprocess.run([*pytest, *pytest_args], env=env, cwd=root).returncode
    log_path = state / "logs" / "pytest-beside.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"dev test: {', '.join(BESIDE)} run beside the other tests; their output follows theirs "
          f"(and is in {log_path.relative_to(root) if log_path.is_relative_to(root) else log_path})", flush=True)
    # SWITCHYARD_TEST_BESIDE: tests/conftest.py refuses a test here that uses the test database or Celery worker
    beside_env = {**env, "SWITCHYARD_TEST_BESIDE": "1",
                  "SWITCHYARD_TEST_BROKER_PORTS": str(ports.base + BESIDE_BROKER_PORTS)}
    with open(log_path, "w") as log:
        # no cache of its own (pytest's last-failed list is the main process's); temporary folders: pytest numbers
        # each run's and locks them, so two runs at once get two
        beside = subprocess.Popen([*pytest, "-p", "no:cacheprovider", *BESIDE], env=beside_env, cwd=root,
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            main = subprocess.run([*pytest, *(f"--ignore={path}" for path in BESIDE)], env=env, cwd=root).returncode
        except BaseException:
            beside.terminate()
            raise
        finally:
            side = beside.wait()
    print(f"\n===== {' '.join(BESIDE)} (run beside the tests above) =====", flush=True)
    sys.stdout.write(log_path.read_text(errors="replace"))
    print(f"dev test: the tests above exited {main}, those beside them {side}", flush=True)
    return main or side
