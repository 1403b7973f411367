"""What the control plane hands Prometheus and Alertmanager, as files in the monitoring folder they read
(SWITCHYARD_MONITORING_DIR, devstack/monitoring.py), each written whole (temporary file, then rename):

    targets/brokers.json   every live broker of every active cluster (file-based discovery), from ZooKeeper
    rules/switchyard.yml   the enabled alarm rules (Prometheus)
    alertmanager.yml       routes and receivers of those rules (Alertmanager)

After writing the rules, both are told to reload (POST /-/reload); a reload that fails (not running, or a
configuration it refuses) leaves the previous one running and is tried again by the periodic publish.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import httpx
from django.conf import settings

from apps.alerts.models import AlertRule
from apps.alerts.rendering import alertmanager_config, prometheus_rules
from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster
from apps.clusters.zookeeper import read_health
from control_plane.celery import app

PUBLISH_TASK = "alerts.publish"  # apps.alerts.tasks.publish, queued by name (tasks import this module)

log = logging.getLogger("apps.alerts.publish")


class PublishFailed(RuntimeError):
    pass


def monitoring_dir() -> Path:
    return Path(settings.SWITCHYARD_MONITORING_DIR)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write text to path whole (readers see the old file or the new one); False when it was already so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def broker_targets() -> list[dict]:
    """file_sd entries of the live brokers (their /brokers/<id> registrations) of every active cluster. A cluster
    whose ZooKeeper does not answer keeps the entries it had in the current file."""
    previous = _read_targets()
    entries = []
    for cluster in Cluster.objects.filter(status=ClusterStatus.ACTIVE).order_by("name"):
        health = read_health(cluster)
        if not health.reachable:
            entries += [e for e in previous if e.get("labels", {}).get("cluster") == cluster.name]
            continue
        for broker in health.brokers:
            if broker.metrics_port:
                entries.append({"targets": [f"{broker.host}:{broker.metrics_port}"],
                                "labels": {"cluster": cluster.name, "node": broker.node_id}})
    return entries


def _read_targets() -> list[dict]:
    try:
        found = json.loads((monitoring_dir() / "targets" / "brokers.json").read_text())
    except (FileNotFoundError, ValueError):
        return []
    return found if isinstance(found, list) else []


def write_targets() -> int:
    entries = broker_targets()
    write_atomic(monitoring_dir() / "targets" / "brokers.json", json.dumps(entries, indent=2) + "\n")
    return len(entries)


def _reload(base_url: str, what: str) -> None:
    try:
        with httpx.Client(timeout=10, follow_redirects=False, trust_env=False) as client:
            response = client.post(f"{base_url}/-/reload")
    except httpx.HTTPError as exc:
        raise PublishFailed(f"{what} at {base_url} did not answer: {exc}") from None
    if response.status_code >= 300:
        raise PublishFailed(f"{what} refused the new configuration: "
                            f"{response.content[:1000].decode(errors='replace')}")


def publish_config() -> int:
    """Render the enabled rules into both files and reload Prometheus and Alertmanager; returns how many rules."""
    rules = list(AlertRule.objects.filter(enabled=True).select_related("cluster", "topic").order_by("pk"))
    write_atomic(monitoring_dir() / "rules" / "switchyard.yml", prometheus_rules(rules))
    # receivers' URLs may carry a credential of the service they call: readable by the owner only
    write_atomic(monitoring_dir() / "alertmanager.yml", alertmanager_config(rules), mode=0o600)
    _reload(settings.SWITCHYARD_ALERTMANAGER_URL, "Alertmanager")
    _reload(settings.SWITCHYARD_PROMETHEUS_URL, "Prometheus")
    return len(rules)


def publish_soon() -> None:
    """After a rule change commits: publish now; when that fails, the worker tries again with backoff."""
    try:
        publish_config()
    except (PublishFailed, OSError) as exc:
        log.warning("alarm rules not published yet, queued again: %s", exc)
        app.send_task(PUBLISH_TASK)
