"""Start and stop the project's own services: PostgreSQL, Redis and ZooKeeper.

Each service runs as a plain process under one state folder, on the project's own
ports, and is stopped by its recorded PID. The test suite uses the same functions to
start extra servers (for instance a ZooKeeper it stops and restarts on purpose).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from broker_core.secret_source import read_secret_file, write_secret_file
from devstack.processes import ServiceError, port_open, read_pid, stop_pid, wait_until
from devstack.zookeeper import Ensemble, start_zookeeper, start_zookeeper_ensemble

log = logging.getLogger("devstack")

PG_BIN = Path(os.environ.get("SWITCHYARD_PG_BIN", "/usr/lib/postgresql/15/bin"))


@dataclass(frozen=True)
class Ports:
    """Every port of one stack, derived from a base so two stacks never collide."""

    base: int

    @property
    def postgres(self) -> int:
        return self.base

    @property
    def redis(self) -> int:
        return self.base + 1

    @property
    def zookeeper(self) -> int:
        return self.base + 2

    @property
    def prometheus(self) -> int:  # devstack/monitoring.py
        return self.base + 3

    @property
    def alertmanager(self) -> int:
        return self.base + 4

    @property
    def ldap(self) -> int:  # the tests' OpenLDAP (devstack/ldap.py)
        return self.base + 5

    @property
    def oidc_provider(self) -> int:  # the tests' OpenID provider (tests/sso/provider)
        return self.base + 6

    @property
    def web(self) -> int:
        return self.base + 10

    def broker(self, index: int) -> int:
        return self.base + 20 + index

    def broker_metrics(self, index: int) -> int:
        return self.base + 40 + index


# --- PostgreSQL -------------------------------------------------------------------------


def _run(argv: list[str], what: str) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise ServiceError(f"{what} failed (exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
                           f"\n  command: {' '.join(argv)}")
    return result


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


def _postgres_can_reach(path: Path) -> bool:
    if os.geteuid() != 0:
        return True
    probe = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(path)], capture_output=True)
    return probe.returncode == 0


def postgres_dir(state: Path) -> Path:
    """PostgreSQL's folder for this stack: state/postgres, or, when the postgres user cannot
    reach the state folder (a clone under /root, say), a folder under /var/lib/switchyard that
    state/postgres links to. A state folder made anew gets a new database either way."""
    link = state / "postgres"
    if link.is_symlink() or link.exists():
        return link.resolve()
    state.mkdir(parents=True, exist_ok=True)
    if _postgres_can_reach(state):
        link.mkdir()
        return link
    outside = Path("/var/lib/switchyard") / ("pg-" + hashlib.sha1(str(state.resolve()).encode()).hexdigest()[:12])
    if outside.exists():
        shutil.rmtree(outside)  # left by an earlier state folder of the same path: start clean
    outside.mkdir(parents=True)
    link.symlink_to(outside)
    return outside


# Roles (issue 16): `postgres`, the superuser, is used by devstack only (roles and databases); the tables
# belong to the owner role, which runs the migrations; the running control plane connects as the runtime role,
# which may only INSERT and SELECT the audit log. Every role logs in with a password over TCP (no trust).
OWNER_ROLE = "switchyard_owner"
RUNTIME_ROLE = "switchyard_app"
_HBA_MARKER = "# switchyard: password authentication (scram-sha-256) for every role over TCP"
PG_HBA = f"""{_HBA_MARKER}
local   all   postgres                 peer
host    all   all        127.0.0.1/32  scram-sha-256
host    all   all        ::1/128       scram-sha-256
"""


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """PostgreSQL's stored form of a SCRAM-SHA-256 password, so ALTER ROLE never carries the password itself."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def pg_passfile(state: Path, port: int) -> Path:
    """A libpq password file (mode 600) with the superuser's line, for devstack's own psql calls."""
    path = state / "secrets" / "pgpass"
    password = read_secret_file(secret_file(state, "postgres-superuser-password"))
    write_secret_file(path, f"127.0.0.1:{port}:*:postgres:{password}")
    return path


def psql(state: Path, port: int, sql: str, what: str, dbname: str = "postgres") -> str:
    """Run sql (on stdin, never argv) as the superuser, authenticated by the password file."""
    argv = ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", dbname, "-v", "ON_ERROR_STOP=1",
            "-qtA", "-f", "-"]
    result = subprocess.run(argv, input=sql, capture_output=True, text=True,
                            env={**os.environ, "PGPASSFILE": str(pg_passfile(state, port))})
    if result.returncode != 0:
        raise ServiceError(f"{what} failed (exit {result.returncode}): {result.stderr.strip()}")
    return result.stdout.strip()


def start_postgres(state: Path, port: int, dbname: str = "switchyard", tuned_for_tests: bool = False) -> None:
    pgdir = postgres_dir(state)
    data = pgdir / "data"
    if os.geteuid() == 0:
        shutil.chown(pgdir, "postgres", "postgres")
    superuser_password = read_secret_file(secret_file(state, "postgres-superuser-password"))
    if not (data / "PG_VERSION").exists():
        # the superuser's password goes to initdb in a file (mode 600, the postgres user's), never on argv
        pwfile = pgdir / "initdb-pwfile"
        write_secret_file(pwfile, superuser_password)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        try:
            _run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", f"--pwfile={pwfile}",
                               "-E", "UTF8", "--locale=C.UTF-8"]), "initdb")
        finally:
            pwfile.unlink(missing_ok=True)
        (data / "pg_hba.conf").write_text(PG_HBA)
    elif _HBA_MARKER not in (data / "pg_hba.conf").read_text():
        raise ServiceError(
            f"the PostgreSQL cluster under {pgdir} was made before password authentication and role separation "
            f"(trust, tables owned by postgres). Stop it and start anew: `./dev down`, remove {state}, then "
            "`./dev up` again (the demo data is seeded anew).")
    if port_open(port):
        if not (data / "postmaster.pid").exists():  # never hand this stack's passwords to someone else's server
            raise ServiceError(f"port {port} is taken by a server that is not this stack's PostgreSQL ({data}): "
                               "stop it, or choose other ports with SWITCHYARD_PORT_BASE")
        log.info("postgres already listening on %s", port)
    else:
        opts = f"-p {port} -k {pgdir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if tuned_for_tests:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        _run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(pgdir / "postgres.log"),
                           "-o", opts, "-w", "-t", "60", "start"]), f"starting postgres (log: {pgdir / 'postgres.log'})")
        log.info("started postgres on %s", port)
    ensure_roles(state, port, dbname, for_tests=tuned_for_tests)


def ensure_roles(state: Path, port: int, dbname: str, for_tests: bool = False) -> None:
    """The owner and runtime roles with this stack's passwords (made once in state/secrets, set on every
    start), and the database owned by the owner role. Idempotent."""
    owner = scram_verifier(read_secret_file(secret_file(state, "db-owner-password")))
    runtime = scram_verifier(read_secret_file(secret_file(state, "db-password")))
    psql(state, port, f"""
SELECT 'CREATE ROLE {OWNER_ROLE}' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{OWNER_ROLE}') \\gexec
SELECT 'CREATE ROLE {RUNTIME_ROLE}' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{RUNTIME_ROLE}') \\gexec
-- the owner creates test databases (pytest-django) and owns the tables; it is no superuser
ALTER ROLE {OWNER_ROLE} LOGIN CREATEDB NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '{owner}';
ALTER ROLE {RUNTIME_ROLE} LOGIN NOCREATEDB NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT
    PASSWORD '{runtime}';
SELECT format('CREATE DATABASE %I OWNER {OWNER_ROLE}', '{dbname}')
    WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '{dbname}') \\gexec
""", "setting up the PostgreSQL roles and database")
    if for_tests:  # a test that makes a deadlock on purpose lets the other session find it (superuser-only otherwise)
        psql(state, port, f"GRANT SET ON PARAMETER deadlock_timeout TO {OWNER_ROLE}", "granting deadlock_timeout")


def stop_postgres(state: Path) -> None:
    if not (state / "postgres").exists():
        return
    data = (state / "postgres").resolve() / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True)
        log.info("stopped postgres")


# --- Redis ------------------------------------------------------------------------------


def start_redis(state: Path, port: int) -> None:
    rdir = state / "redis"
    rdir.mkdir(parents=True, exist_ok=True)
    pidfile = state / "pids" / "redis.pid"
    (state / "pids").mkdir(parents=True, exist_ok=True)
    if read_pid(pidfile) and port_open(port):
        return
    subprocess.run(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--daemonize", "yes", "--pidfile", str(pidfile), "--dir", str(rdir),
         "--logfile", str(rdir / "redis.log")],
        check=True,
    )
    wait_until(lambda: port_open(port), 10, "redis")
    log.info("started redis on %s", port)


# --- the whole set ----------------------------------------------------------------------


def ensemble_of(ports: Ports, nodes: int) -> Ensemble:
    """The multi-node profile's ZooKeeper ensemble: clients on base+2, base+7, base+8 (, ...), quorum on base+50...."""
    client = (ports.zookeeper, *(ports.base + 7 + i for i in range(nodes - 1)))
    return Ensemble("zookeeper", client, tuple(ports.base + 50 + i for i in range(2 * nodes)))


def start_core(state: Path, ports: Ports, tuned_for_tests: bool = False, ensemble: Ensemble | None = None) -> None:
    start_postgres(state, ports.postgres, tuned_for_tests=tuned_for_tests)
    start_redis(state, ports.redis)
    if ensemble is None:
        start_zookeeper(state, ports.zookeeper)
    else:
        start_zookeeper_ensemble(state, ensemble)


def stop_all(state: Path) -> None:
    """Stop every process recorded under state/pids, then PostgreSQL."""
    pids = state / "pids"
    if pids.is_dir():
        # application processes first, data services last
        order = sorted(pids.glob("*.pid"), key=lambda p: p.stem == "redis" or p.stem.startswith("zookeeper"))
        for pidfile in order:
            stop_pid(pidfile, pidfile.stem)
    stop_postgres(state)


def secret_file(state: Path, name: str, nbytes: int = 32) -> Path:
    """A random secret of this stack, made once and kept in state/secrets/NAME (mode 600), so a second
    `./dev up` gives the running processes the same one. Processes get the file's path in a
    `SWITCHYARD_*_FILE` variable (broker_core.secret_source.read_secret), never the value."""
    path = state / "secrets" / name
    if not (path.exists() and path.read_text().strip()):
        (state / "secrets").mkdir(parents=True, exist_ok=True)
        (state / "secrets").chmod(0o700)
        write_secret_file(path, secrets.token_urlsafe(nbytes))
    return path


def zk_auth_file(state: Path, role: str) -> Path:
    """The ZooKeeper digest credential (`switchyard-<role>:<random>`) of this stack's control plane or brokers,
    made once in state/secrets/zk-<role>-auth (mode 600); see docs/security.md."""
    path = state / "secrets" / f"zk-{role}-auth"
    if not (path.exists() and path.read_text().strip()):
        (state / "secrets").mkdir(parents=True, exist_ok=True)
        (state / "secrets").chmod(0o700)
        write_secret_file(path, f"switchyard-{role}:{secrets.token_urlsafe(32)}")
    return path


def admin_token(state: Path) -> str:
    """The brokers' admin API token of this stack (state/secrets/broker-admin-token)."""
    return read_secret_file(secret_file(state, "broker-admin-token"))


def environment(state: Path, ports: Ports, dbname: str = "switchyard", zk_hosts: str | None = None) -> dict[str, str]:
    """The variables the control plane, workers and tests read to find this stack (ZK_HOSTS: an ensemble's
    connection string, instead of the one server on base+2)."""
    return {
        "SWITCHYARD_STATE": str(state),
        "SWITCHYARD_PORT_BASE": str(ports.base),
        "SWITCHYARD_DB_HOST": "127.0.0.1",
        "SWITCHYARD_DB_PORT": str(ports.postgres),
        "SWITCHYARD_DB_NAME": dbname,
        # the runtime role; `manage.py migrate` (and the test suite) add SWITCHYARD_DB_ROLE=owner
        "SWITCHYARD_DB_USER": RUNTIME_ROLE,
        "SWITCHYARD_DB_PASSWORD_FILE": str(secret_file(state, "db-password")),
        "SWITCHYARD_DB_OWNER_USER": OWNER_ROLE,
        "SWITCHYARD_DB_OWNER_PASSWORD_FILE": str(secret_file(state, "db-owner-password")),
        "SWITCHYARD_AUDIT_CHECKPOINT_KEY_FILE": str(secret_file(state, "audit-checkpoint-key")),
        "SWITCHYARD_REDIS_URL": f"redis://127.0.0.1:{ports.redis}/0",
        "SWITCHYARD_ZK": zk_hosts or f"127.0.0.1:{ports.zookeeper}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        # the brokers' admin token (their HTTP side but /healthz and /metrics): the path of its file, never the
        # value; the control plane (settings, read_secret) and the demo brokers read it from there
        "SWITCHYARD_BROKER_ADMIN_TOKEN_FILE": str(secret_file(state, "broker-admin-token")),
        # ZooKeeper ACLs: the control plane writes as one identity, brokers read as another (files, not values)
        "SWITCHYARD_ZK_CONTROL_AUTH_FILE": str(zk_auth_file(state, "control")),
        "SWITCHYARD_ZK_BROKER_AUTH_FILE": str(zk_auth_file(state, "broker")),
        # the control plane's Django secret key: a file of this stack (Django wants 50+ characters)
        "SWITCHYARD_SECRET_KEY_FILE": str(secret_file(state, "django-secret-key", nbytes=48)),
        # Prometheus and Alertmanager (devstack/monitoring.py): their folder, and the token they present to /metrics
        "SWITCHYARD_MONITORING_DIR": str(state / "monitoring"),
        "SWITCHYARD_MONITORING_TOKEN_FILE": str(secret_file(state, "monitoring-token")),
    }


def write_env(state: Path, env: dict[str, str]) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / "env.json").write_text(json.dumps(env, indent=2))
    (state / "env.sh").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
