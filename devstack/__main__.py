"""`python -m devstack up|test|down|status` — called by the README's `./dev` script."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

from devstack import monitoring, services, testrun
from devstack.processes import ServiceError, port_open, read_pid, spawn, wait_until
from devstack.services import Ports

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {"dev": 27100, "test": 27200, "multi": 27400}  # multi: `./dev up --nodes 3` (docs/deploy.md)
DEMO_LOGINS = [
    ("dev-alice", "developer"),
    ("appr-bob", "approver"),
    ("sre-carol", "SRE"),
    ("audit-dan", "auditor"),
    ("admin", "admin"),
]
DEMO_PASSWORD = "switchyard"
DEMO_SECRETS = "demo-app-secrets.json"  # the demo apps' secrets (shown once at creation), for demo_traffic.py


def state_for(profile: str) -> tuple[Path, Ports]:
    root = Path(os.environ.get("SWITCHYARD_STATE_ROOT", ROOT / ".devstack"))
    base = int(os.environ.get("SWITCHYARD_PORT_BASE", PROFILES[profile]))
    return root / profile, Ports(base)


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], check=True, env={**os.environ, **env},
                   cwd=ROOT)


def up(nodes: int = 1) -> None:
    """The whole stack with demo data; NODES > 1: a ZooKeeper ensemble of that many servers and that many brokers
    per demo cluster, under their own state folder and ports (the "multi" profile)."""
    state, ports = state_for("dev" if nodes == 1 else "multi")
    ensemble = services.ensemble_of(ports, nodes) if nodes > 1 else None
    services.start_core(state, ports, ensemble=ensemble)
    env = services.environment(state, ports, zk_hosts=ensemble.hosts if ensemble else None)
    services.write_env(state, env)
    manage({**env, "SWITCHYARD_DB_ROLE": "owner"}, "migrate", "--noinput", "-v", "0")  # DDL as the owner
    manage(env, "collectstatic", "--noinput", "-v", "0")
    manage(env, "seed_demo", "--zk", env["SWITCHYARD_ZK"], "--broker-port-base", str(ports.broker(0)),
           "--secrets-file", str(state / DEMO_SECRETS))
    manage(env, "secure_zookeeper", "--all")  # ZooKeeper ACLs, also on chroots an older stack made open
    py = sys.executable
    spawn("web", [py, "-m", "gunicorn", "control_plane.wsgi", "-b", f"127.0.0.1:{ports.web}",
                           "-w", "3", "--access-logfile", "-"], state, env, ROOT)
    spawn("celery-worker", [py, "-m", "celery", "-A", "control_plane", "worker", "-l", "info",
                                     "-c", "2", "-n", "switchyard-dev@%h"], state, env, ROOT)
    spawn("celery-beat", [py, "-m", "celery", "-A", "control_plane", "beat", "-l", "info",
                                   "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler",
                                   "--pidfile", ""], state, env, ROOT)
    start_demo_brokers(state, ports, env, nodes)
    wait_until(lambda: port_open(ports.web), 30, "web server")
    monitoring.start_monitoring(state, ports, control_plane=f"127.0.0.1:{ports.web}")
    manage(env, "publish_monitoring")  # the brokers to scrape and the alarm rules, rendered from the database
    print()
    print(f"Switchyard is up: http://127.0.0.1:{ports.web}/")
    print(f"  API docs:  http://127.0.0.1:{ports.web}/api/v1/docs/")
    print(f"  Prometheus: http://127.0.0.1:{ports.prometheus}/  Alertmanager: http://127.0.0.1:{ports.alertmanager}/")
    print(f"  logins (password '{DEMO_PASSWORD}'):")
    for user, role in DEMO_LOGINS:
        print(f"    {user:<10} {role}")
    print(f"  state and logs: {state}")
    print("  stop everything: ./dev down")


def start_demo_brokers(state: Path, ports: Ports, env: dict[str, str], nodes: int = 1) -> None:
    """Start NODES broker nodes per demo cluster, when the broker core is present."""
    demo = ROOT / "devstack" / "demo_traffic.py"
    if not (ROOT / "broker_core" / "__main__.py").exists():
        return
    # a broker holds its own ZooKeeper credential, not the control plane's
    broker_env = {k: v for k, v in env.items() if not k.startswith("SWITCHYARD_ZK_CONTROL_AUTH")}
    for c, cluster in enumerate(("dev-a", "prod-a")):
        for n in range(nodes):
            index = c * nodes + n
            name = f"broker-{cluster}" if nodes == 1 else f"broker-{cluster}-{n + 1}"
            node = ["--node-id", f"{cluster}-b{n + 1}"] if nodes > 1 else []
            data = state / "brokers" / (cluster if nodes == 1 else f"{cluster}-{n + 1}")
            spawn(
                name,
                [sys.executable, "-m", "broker_core", "--cluster", cluster, "--zk",
                 f"{env['SWITCHYARD_ZK']}/switchyard/{cluster}", "--data-dir", str(data), *node,
                 "--port", str(ports.broker(index)), "--metrics-port", str(ports.broker_metrics(index))],
                state, broker_env, ROOT,  # admin token: env's _FILE, never argv
            )
    if demo.exists():
        spawn("demo-traffic", [sys.executable, str(demo), "--secrets-file", str(state / DEMO_SECRETS)],
                       state, env, ROOT)


def test(pytest_args: list[str]) -> int:
    state, ports = state_for("test")
    services.start_core(state, ports, tuned_for_tests=True)
    env = services.environment(state, ports)
    services.write_env(state, env)
    try:
        failed = style_checks({**os.environ, **env, "SWITCHYARD_DB_ROLE": "owner"})
        if failed:
            print(f"dev test: {failed} failed (see above); fix it before the tests run", file=sys.stderr)
            return 1
        # pytest-django creates the test database and migrates it: as the owner (the Celery worker the tests
        # start, and the tests of the guarantee, connect as the runtime role)
        return testrun.run(pytest_args, {**os.environ, **env, "SWITCHYARD_DB_ROLE": "owner"}, state, ports, ROOT)
    finally:
        if not os.environ.get("SWITCHYARD_KEEP_SERVICES"):
            services.stop_all(state)


def style_checks(env: dict[str, str]) -> str | None:
    """What CI checks besides the tests: ruff and the import contracts (pyproject.toml), and no model change
    without its migration. Returns the name of the first check that failed."""
    checks = [
        ("ruff check", [sys.executable, "-m", "ruff", "check", "--quiet", "."]),
        # run with -c so that this checkout comes first on sys.path: the contracts are checked on this tree
        ("lint-imports", [sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                                                "lint_imports_command()"]),
        ("makemigrations --check", [sys.executable, str(ROOT / "manage.py"), "makemigrations", "--check", "--dry-run",
                                    "-v", "1"]),
    ]
    for name, argv in checks:
        if subprocess.run(argv, env=env, cwd=ROOT).returncode != 0:
            return name
    return None


def down() -> None:
    root = Path(os.environ.get("SWITCHYARD_STATE_ROOT", ROOT / ".devstack"))
    for profile in PROFILES:
        if (root / profile).exists():
            services.stop_all(root / profile)
    print("Switchyard is down.")


def status() -> None:
    for profile in PROFILES:
        state, ports = state_for(profile)
        pids = sorted((state / "pids").glob("*.pid")) if (state / "pids").exists() else []
        print(f"[{profile}] {state}")
        for pidfile in pids:
            pid = read_pid(pidfile)
            print(f"  {pidfile.stem:<20} {'running pid ' + str(pid) if pid else 'stopped'}")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="devstack %(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="dev")
    parser.add_argument("command", choices=["up", "test", "down", "status"])
    parser.add_argument("--nodes", type=int, choices=[1, 3], default=1,
                        help="up: 3 starts a three-server ZooKeeper ensemble and three brokers per demo cluster")
    args, rest = parser.parse_known_args()
    try:
        if args.command == "up":
            up(args.nodes)
        elif args.command == "test":
            return test(rest)
        elif args.command == "down":
            down()
        else:
            status()
    except (ServiceError, subprocess.CalledProcessError) as exc:
        print(f"dev {args.command}: {exc}", file=sys.stderr)
        print("Logs are under the state folder's logs/ (./dev status lists it); ./dev down stops what started.",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
