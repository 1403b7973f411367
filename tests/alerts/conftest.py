"""Fixtures of the alarm tests: a real Prometheus and Alertmanager (devstack/monitoring.py) scraping this run's
control plane (pytest-django's live server) every second, an SMTP sink and a webhook receiver."""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from devstack.waiting import wait_for  # noqa: F401  (the alert tests import it from here)
from tests.broker.conftest import cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.governance.conftest import approved_topic, make_cluster, people, topic_fields  # noqa: F401
from tests.integration.conftest import governed  # noqa: F401


@pytest.fixture(scope="module")
def monitoring(live_server):
    """Prometheus (base+3) and Alertmanager (base+4) of this test stack, 1 s scrape and evaluation intervals,
    started for the modules that need them and stopped after each (so nothing scrapes the live server while
    other tests run)."""
    import shutil

    from devstack import monitoring as mon
    from tests.support.stack import ports, state_dir

    state, stack_ports = state_dir(), ports()
    for data in ("prometheus", "alertmanager"):  # no series, alerts or silences of an earlier run
        shutil.rmtree(mon.monitoring_dir(state) / data, ignore_errors=True)
    # nor its brokers: a new broker on an earlier one's port would be scraped under the earlier node's labels too
    (mon.monitoring_dir(state) / "targets" / "brokers.json").unlink(missing_ok=True)
    host = urllib.parse.urlsplit(live_server.url).netloc
    mon.start_monitoring(state, stack_ports, control_plane=host, interval="1s")
    try:
        yield {"prometheus": f"http://127.0.0.1:{stack_ports.prometheus}",
               "alertmanager": f"http://127.0.0.1:{stack_ports.alertmanager}", "dir": mon.monitoring_dir(state)}
    finally:
        mon.stop_monitoring(state)


@pytest.fixture
def alert_settings(settings, live_server, monitoring, smtp_sink):
    """What the control plane renders for this run: short Alertmanager timers, this run's web server and sink."""
    settings.SWITCHYARD_CONTROL_PLANE_URL = live_server.url
    settings.SWITCHYARD_ALERT_SMTP_SMARTHOST = f"127.0.0.1:{smtp_sink.port}"
    settings.SWITCHYARD_ALERT_GROUP_WAIT = "1s"
    settings.SWITCHYARD_ALERT_GROUP_INTERVAL = "1s"
    settings.SWITCHYARD_ALERT_REPEAT_INTERVAL = "1h"
    settings.SWITCHYARD_MONITORING_DIR = str(monitoring["dir"])
    settings.SWITCHYARD_PROMETHEUS_URL = monitoring["prometheus"]
    settings.SWITCHYARD_ALERTMANAGER_URL = monitoring["alertmanager"]
    return settings


def prometheus_query(base_url: str, query: str) -> list[dict]:
    url = f"{base_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())["data"]["result"]


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that keeps every JSON body posted to it."""

    def __init__(self):
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def statuses(self, alertname: str) -> list[str]:
        return [a["status"] for body in list(self.received) for a in body["alerts"]
                if a["labels"].get("alertname") == alertname]


@pytest.fixture
def webhook():
    receiver = WebhookReceiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


class SmtpSink:
    """An SMTP server on 127.0.0.1 (aiosmtpd) that keeps every message: (recipients, text)."""

    def __init__(self):
        from aiosmtpd.controller import Controller

        messages = self.messages = []

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                messages.append((list(envelope.rcpt_tos), envelope.content.decode("utf-8", errors="replace")))
                return "250 OK"

        import socket

        with socket.socket() as probe:  # a free port (the controller checks its server by connecting to it)
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self):
        self.controller.stop()


@pytest.fixture(scope="session")
def smtp_sink():
    sink = SmtpSink()
    yield sink
    sink.stop()
