"""The control plane's /metrics (Prometheus text), read from the database at scrape time, and who may call it.

Who may call: only the holder of the stack's monitoring token (`Authorization: Bearer <token>`, the variable
SWITCHYARD_MONITORING_TOKEN or the mode-600 file SWITCHYARD_MONITORING_TOKEN_FILE names): Prometheus, which reads
it from that file (`credentials_file`), and Alertmanager posting to /alerts/notify. No or a wrong token → 401; a
control plane without a token → 403 for everyone (fail closed). The figures name clusters, topics and states,
no message data and no secrets.

Figures: applications by kind and state, provisioning lag, ZooKeeper drift, the audit chain's anchor, the
transaction back-check backlog (docs/alerts.md lists them). The brokers' own figures (authentication failures,
consumers, backlog) Prometheus scrapes from each broker.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from apps.audit.metrics import AuditCollector
from apps.clusters.metrics import PartitionCollector
from apps.governance.metrics import ApplicationCollector
from apps.provisioning.metrics import DriftCollector
from apps.transactions.metrics import TxCollector


def refuse_unless_monitoring(request) -> HttpResponse | None:
    """None when the request carries the monitoring token; else the answer that refuses it."""
    expected = settings.SWITCHYARD_MONITORING_TOKEN
    if not expected:
        return JsonResponse({"error": "monitoring_disabled", "message": "this control plane has no monitoring "
                             "token (SWITCHYARD_MONITORING_TOKEN_FILE): nobody may call this"}, status=403)
    given = request.headers.get("Authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected.encode()):
        response = JsonResponse({"error": "unauthorized", "message": "needs the monitoring bearer token"}, status=401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    return None


def registry() -> CollectorRegistry:
    found = CollectorRegistry()
    for collector in (ApplicationCollector(), DriftCollector(), AuditCollector(), TxCollector(), PartitionCollector()):
        found.register(collector)
    return found


def metrics(request):
    refused = refuse_unless_monitoring(request)
    if refused is not None:
        return refused
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
