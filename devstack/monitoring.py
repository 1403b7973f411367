"""Prometheus and Alertmanager (Debian's packages) as the project's own processes, never the system services.

Both keep their configuration and data under `<state>/monitoring/`:

    prometheus.yml        written here: scrape the brokers (file-based discovery) and the control plane
    targets/brokers.json  the brokers to scrape, written by the control plane from ZooKeeper membership
    rules/*.yml           the alarm rules, rendered by the control plane from its AlertRule table
    alertmanager.yml      rendered by the control plane (receivers); a first one that routes nowhere is made here
    prometheus/, alertmanager/   their data

Prometheus listens on base+3 and Alertmanager on base+4, both on 127.0.0.1, with `--web.enable-lifecycle` so the
control plane reloads them after a change (POST /-/reload). Prometheus authenticates to the control plane's
/metrics with the stack's monitoring token (a mode-600 file, `credentials_file`: never in the configuration).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from devstack.processes import port_open, spawn, stop_pid, wait_until
from devstack.services import Ports, secret_file

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
BROKERS_JOB = "switchyard-brokers"
CONTROL_PLANE_JOB = "switchyard-control-plane"

# what the control plane's Alertmanager configuration is until it renders its own (receivers come from rules)
INITIAL_ALERTMANAGER = """# rendered by the control plane (apps/alerts) once it has rules; until then nothing is sent
route:
  receiver: nowhere
receivers:
  - name: nowhere
"""


def monitoring_dir(state: Path) -> Path:
    return state / "monitoring"


def monitoring_token_file(state: Path) -> Path:
    """The bearer token Prometheus and Alertmanager present to the control plane (/metrics, /alerts/notify)."""
    return secret_file(state, "monitoring-token")


def prometheus_config(state: Path, ports: Ports, control_plane: str, interval: str = "15s") -> str:
    """prometheus.yml: `control_plane` is the host:port of the control plane's web server."""
    mdir = monitoring_dir(state)
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(mdir / "rules" / "*.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{ports.alertmanager}"]}]}]},
        "scrape_configs": [
            {
                "job_name": BROKERS_JOB,
                # the target's cluster and node (the control plane's names) win; a broker's own are kept as
                # exported_cluster and exported_node
                "honor_labels": False,
                "file_sd_configs": [{"files": [str(mdir / "targets" / "brokers.json")], "refresh_interval": interval}],
            },
            {
                "job_name": CONTROL_PLANE_JOB,
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(monitoring_token_file(state))},
                "static_configs": [{"targets": [control_plane]}],
            },
        ],
    }
    return json.dumps(config, indent=2)  # JSON is YAML


def start_prometheus(state: Path, ports: Ports, control_plane: str, interval: str = "15s") -> None:
    mdir = monitoring_dir(state)
    for sub in ("rules", "targets", "prometheus"):
        (mdir / sub).mkdir(parents=True, exist_ok=True)
    targets = mdir / "targets" / "brokers.json"
    if not targets.exists():
        targets.write_text("[]\n")
    (mdir / "prometheus.yml").write_text(prometheus_config(state, ports, control_plane, interval))
    if port_open(ports.prometheus):
        reload(f"http://127.0.0.1:{ports.prometheus}")  # already ours and running: read the new configuration
        return
    spawn("prometheus", [PROMETHEUS, f"--config.file={mdir / 'prometheus.yml'}",
                         f"--storage.tsdb.path={mdir / 'prometheus'}",
                         f"--web.listen-address=127.0.0.1:{ports.prometheus}", "--web.enable-lifecycle",
                         # a firing alert is sent to Alertmanager again every 5 s (default 1 min): one sent while
                         # Prometheus had no Alertmanager (the first ~5 s after each reload, i.e. each rule change,
                         # or while Alertmanager restarts) arrives seconds later, not a minute
                         "--rules.alert.resend-delay=5s",
                         "--storage.tsdb.retention.time=2d"], state)
    wait_until(lambda: _ready(f"http://127.0.0.1:{ports.prometheus}"), 60, f"prometheus on {ports.prometheus}")


def start_alertmanager(state: Path, ports: Ports) -> None:
    mdir = monitoring_dir(state)
    (mdir / "alertmanager").mkdir(parents=True, exist_ok=True)
    config = mdir / "alertmanager.yml"
    if not config.exists():
        config.write_text(INITIAL_ALERTMANAGER)
    if port_open(ports.alertmanager):
        return
    # no cluster peers: one instance of a stack gossips with nobody (an empty listen address turns HA off)
    spawn("alertmanager", [ALERTMANAGER, f"--config.file={config}", f"--storage.path={mdir / 'alertmanager'}",
                           f"--web.listen-address=127.0.0.1:{ports.alertmanager}", "--cluster.listen-address=",
                           "--data.retention=120h"], state)
    wait_until(lambda: _ready(f"http://127.0.0.1:{ports.alertmanager}"), 60, f"alertmanager on {ports.alertmanager}")


def start_monitoring(state: Path, ports: Ports, control_plane: str, interval: str = "15s") -> None:
    start_alertmanager(state, ports)
    start_prometheus(state, ports, control_plane, interval)


def stop_monitoring(state: Path) -> None:
    for name in ("prometheus", "alertmanager"):
        stop_pid(state / "pids" / f"{name}.pid", name)


def reload(base_url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{base_url}/-/reload", method="POST"), timeout=10).close()


def _ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/-/ready", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False
