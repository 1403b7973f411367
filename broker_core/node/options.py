"""Broker settings, in one place. Sources, later wins: defaults, config file, environment, command line.

    python -m broker_core --cluster NAME --zk HOST:PORT[,HOST:PORT]/CHROOT --data-dir DIR --port N
                          [--metrics-port M] [--config broker.toml] [--fsync batch|interval|never] ...

The config file is TOML (or JSON if it ends in .json) with the same names as the fields below,
e.g. `fsync = "interval"`. Environment variables are `SWITCHYARD_BROKER_<FIELD>` in upper case,
e.g. `SWITCHYARD_BROKER_FSYNC=never`.

The admin token of the HTTP side is a secret: it comes only from the environment, as
`SWITCHYARD_BROKER_ADMIN_TOKEN` or as the file `SWITCHYARD_BROKER_ADMIN_TOKEN_FILE` names (mode 600),
never from the command line (`ps` shows it to every user) nor from the config file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.secret_source import SecretSourceError, read_secret

ENV_PREFIX = "SWITCHYARD_BROKER_"


@dataclass
class Options:
    cluster: str = ""
    zk: str = ""  # host:port[,host:port...][/chroot], as kazoo takes it
    data_dir: Path = Path("broker-data")
    host: str = "127.0.0.1"  # where to listen
    port: int = 27500
    advertise_host: str = ""  # the address written to ZooKeeper (default: host, or 127.0.0.1)
    metrics_port: int = 0  # HTTP /metrics and /stats; 0 turns it off
    metrics_host: str = "127.0.0.1"
    node_id: str = ""  # default: kept in <data_dir>/node_id, made once
    storage: str = "file"  # the cluster's level: "file" or "memory" (a topic document may override it)
    fsync: str = "batch"  # "batch" (group commit), "interval" or "never"
    fsync_interval_ms: int = 200
    segment_bytes: int = 64 * 1024 * 1024
    segment_idle_s: float = 30.0  # a finished active segment that took nothing this long is sealed (and deleted)
    max_frame_bytes: int = 16 * 1024 * 1024
    max_message_bytes: int = 4 * 1024 * 1024
    heartbeat_ms: int = 5000  # a client may ask for a value between min_heartbeat_ms and this one
    min_heartbeat_ms: int = 100
    missed_heartbeats: float = 2.5  # silence longer than this many intervals closes a connection
    hello_timeout_ms: int = 10_000
    ack_timeout_ms: int = 30_000
    min_ack_timeout_ms: int = 100
    max_ack_timeout_ms: int = 15 * 60 * 1000
    max_credit: int = 10_000  # per subscription; a binding's max_in_flight lowers it
    slow_consumer_timeout_ms: int = 30_000  # a consumer whose output stays full this long is cut off
    # memory bounds (broker_core/README.md "Memory bound" gives the formula they enter)
    max_prehello_frame_bytes: int = 4096  # until Hello succeeds, a larger frame closes the connection
    max_connections: int = 1024  # client connections in total; more are refused (too_many_connections)
    max_connections_per_host: int = 256  # client connections from one source address
    max_outbuf_bytes: int = 4 * 1024 * 1024  # bytes queued to one connection; delivery to it stops past this
    max_http_connections: int = 32  # concurrent HTTP requests (metrics, stats, admin); more get 503
    # a group of a file-stored topic holds at most this many owed messages waiting in memory (and about this many
    # bytes of bodies); the rest of its backlog stays in the log and is read back as the window empties
    backlog_window_messages: int = 10_000
    backlog_window_bytes: int = 16 * 1024 * 1024
    tick_ms: int = 20
    zk_session_timeout_s: float = 4.0  # also how soon a dead leader's partitions elect another (issue 20: <= 5 s)
    # a follower that has not stored a pending publish for this long leaves the partition's in-sync replicas
    replica_lag_timeout_ms: int = 2000
    zk_start_timeout_s: float = 15.0
    trace: bool = True  # write trace events to trace_dir (the tracing index reads them); --no-trace: off
    trace_dir: Path | None = None  # default: <data_dir>/trace
    # roll (close and convert to Parquet) the open trace file at this size or age; None: the writer's
    # default (256 MiB of open file, about 3.5 million events, or 60 s)
    trace_roll_mb: int | None = None
    trace_roll_s: float | None = None
    # bearer token of the HTTP side (all but /healthz and /metrics); empty: those refuse every call (403).
    # From the environment only (see above): never a command-line flag nor a config-file setting.
    admin_token: str = field(default="", repr=False)
    log_level: str = "INFO"
    extra: dict = field(default_factory=dict)

    def validate(self) -> Options:
        if not self.cluster:
            raise ValueError("--cluster is required")
        if not self.zk:
            raise ValueError("--zk is required (host:port[/chroot])")
        if self.storage not in ("file", "memory"):
            raise ValueError("storage must be 'file' or 'memory'")
        if self.trace_roll_mb is not None and self.trace_roll_mb <= 0:
            raise ValueError("trace_roll_mb must be a positive number of MiB")
        if self.trace_roll_s is not None and self.trace_roll_s <= 0:
            raise ValueError("trace_roll_s must be a positive number of seconds")
        if self.segment_idle_s <= 0:
            raise ValueError("segment_idle_s must be a positive number of seconds")
        if self.fsync not in ("batch", "interval", "never"):
            raise ValueError("fsync must be 'batch', 'interval' or 'never'")
        if not 0 < self.port < 65536:
            raise ValueError("port must be between 1 and 65535")
        if not 256 <= self.max_prehello_frame_bytes <= self.max_frame_bytes:
            raise ValueError("max_prehello_frame_bytes must be between 256 and max_frame_bytes")
        for name in ("max_connections", "max_connections_per_host", "max_http_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.backlog_window_messages < 16 or self.backlog_window_bytes < 64 * 1024:
            raise ValueError("backlog_window_messages must be at least 16 and backlog_window_bytes at least 65536")
        if self.max_outbuf_bytes < 64 * 1024:  # the transport's own high-water mark (pause_writing)
            raise ValueError("max_outbuf_bytes must be at least 65536")
        self.data_dir = Path(self.data_dir)
        if self.trace_dir is not None:
            self.trace_dir = Path(self.trace_dir)
        if not self.advertise_host:
            self.advertise_host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        return self

    @property
    def zk_hosts(self) -> str:
        return self.zk.split("/", 1)[0]

    @property
    def zk_chroot(self) -> str:
        return "/" + self.zk.split("/", 1)[1] if "/" in self.zk else ""


SECRET_FIELDS = {"admin_token": "SWITCHYARD_BROKER_ADMIN_TOKEN"}  # field -> variable read_secret reads
_FIELDS = {f.name: f for f in dataclasses.fields(Options) if f.name != "extra" and f.name not in SECRET_FIELDS}


def _secret_refusal(name: str, where: str) -> str:
    var = SECRET_FIELDS[name]
    return (f"{name} is a secret and is not accepted {where}; set {var} or {var}_FILE (a file of mode 600) "
            "in the broker's environment instead")


def _convert(name: str, value):
    kind = _FIELDS[name].type
    if value is None:
        return None
    if "bool" in kind:
        return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
    if "int" in kind:
        return int(value)
    if "float" in kind:
        return float(value)
    if "Path" in kind:
        return Path(value)
    return str(value)


def load_file(path: Path) -> dict:
    data = path.read_bytes()
    doc = json.loads(data) if path.suffix == ".json" else tomllib.loads(data.decode())
    for name in SECRET_FIELDS:
        if name in doc:
            raise ValueError(f"{path}: " + _secret_refusal(name, "in a config file"))
    unknown = set(doc) - set(_FIELDS)
    if unknown:
        raise ValueError(f"unknown settings in {path}: {', '.join(sorted(unknown))}")
    return doc


def parse(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m broker_core", description="Switchyard broker node")
    parser.add_argument("--config", type=Path, help="TOML or JSON file of settings")
    for name, f in _FIELDS.items():
        flag = "--" + name.replace("_", "-")
        if "bool" in f.type:
            parser.add_argument(flag, dest=name, default=None, action=argparse.BooleanOptionalAction)
        else:
            parser.add_argument(flag, dest=name, default=None)
    for name in SECRET_FIELDS:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=f"refused_{name}", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in SECRET_FIELDS:
        if getattr(args, f"refused_{name}") is not None:
            parser.error(_secret_refusal(name, "on the command line (ps shows it to every user)"))
    values: dict = {}
    if args.config:
        values.update(load_file(args.config))
    environ = os.environ if environ is None else environ
    for name in _FIELDS:
        env = environ.get(ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = env
    for name in _FIELDS:
        cli = getattr(args, name)
        if cli is not None:
            values[name] = cli
    try:
        for name, var in SECRET_FIELDS.items():
            values[name] = read_secret(var, environ, default="")
    except SecretSourceError as exc:
        parser.error(str(exc))
    opts = Options(**{k: _convert(k, v) if k in _FIELDS else v for k, v in values.items()})
    try:
        return opts.validate()
    except ValueError as exc:
        parser.error(str(exc))
        raise
