"""The HTTP back-check cannot be turned against the network it runs in (issue 16, Build 8).

Real HTTP servers on loopback, a real database holding the cluster and the app, and the function a check
round calls for messages no connection could answer (`backcheck._http_checks`). A redirect is refused and
not followed; a link-local address is refused without a connection; a host off the app's allow-list is
refused; an oversize answer is refused; a private address is refused unless the cluster allows it.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apps.transactions import backcheck
from apps.transactions.models import PreparedMessage

APP = "pay-checker"


class Server:
    """A real HTTP server on 127.0.0.1: answers with `respond(handler)`, remembers each request's path and
    Host header."""

    def __init__(self, respond):
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((self.path, self.headers.get("Host", "")))
                respond(self)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}/tx-check"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def answer(body: bytes, status: int = 200, headers: dict | None = None, length: bool = True):
    def respond(handler):
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        if length:
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
        if not length:
            handler.close_connection = True
    return respond


@pytest.fixture
def servers():
    started = []

    def start(respond):
        server = Server(respond)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def setup(people, zk_connect, zk_chroot):
    """A cluster that does not allow private addresses (the default) and the app whose messages are checked."""
    from types import SimpleNamespace

    from apps.clusters import actions as cluster_actions
    from apps.topics import actions

    cluster = cluster_actions.create_cluster(actor=people.admin, name="guarded", environment="dev", region="local",
                                             zk_connect=zk_connect, zk_chroot=zk_chroot, storage_level="file")
    app, _ = actions.create_app(actor=people.dev, app_id=APP, team=people.dev.teams.get())
    return SimpleNamespace(cluster=cluster, app=app, people=people)


def configure(setup, *, url: str, hosts: list[str], allow_private: bool = True):
    """What an approver, the app's developer and an SRE would set (directly on the rows: the actions' own
    checks are tested in test_settings_api)."""
    from apps.clusters.models import Cluster
    from apps.topics.models import App

    App.objects.filter(pk=setup.app.pk).update(check_url=url, check_hosts=hosts)
    Cluster.objects.filter(pk=setup.cluster.pk).update(backcheck_allow_private=allow_private)
    setup.cluster.refresh_from_db()


def check(setup) -> tuple[str, str, str]:
    """One HTTP back-check of one prepared message of the app, as a check round runs it: (via, answer, error)."""
    row = PreparedMessage.objects.create(cluster=setup.cluster, broker="b1", message_id=f"m-{PreparedMessage.objects.count()}",
                                         topic="orders", app_id=APP, prepared_at="2026-01-01T00:00:00Z")
    via, answer_, _, error, _ = backcheck._http_checks(setup.cluster, [row])[row.pk]
    return via, answer_, error


@pytest.fixture
def connections(monkeypatch):
    """Every TCP connection the process opens, observed (then made as usual)."""
    seen: list[tuple] = []
    real = socket.create_connection

    def observed(address, *args, **kwargs):
        seen.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", observed)
    return seen


def test_an_allowed_loopback_check_answers(setup, servers, connections):
    server = servers(answer(b'{"state": "commit"}'))
    configure(setup, url=server.url, hosts=[f"127.0.0.1:{server.port}"])
    assert check(setup) == ("http", "commit", "")
    assert server.requests == [("/tx-check", f"127.0.0.1:{server.port}")]
    assert ("127.0.0.1", server.port) in connections  # the observer sees connections


def test_a_redirect_is_refused_and_not_followed(setup, servers):
    target = servers(answer(b'{"state": "commit"}'))
    redirecting = servers(answer(b"", status=302, headers={"Location": target.url}))
    configure(setup, url=redirecting.url, hosts=["127.0.0.1"])
    via, answer_, error = check(setup)
    assert (via, answer_) == ("http", "unknown")
    assert "302" in error and "redirects are not followed" in error, error
    assert len(redirecting.requests) == 1
    assert target.requests == []  # the redirect's target was never asked


def test_a_link_local_address_is_refused_without_a_connection(setup, connections):
    configure(setup, url="http://169.254.169.254/latest/meta-data/", hosts=["169.254.169.254"], allow_private=True)
    via, answer_, error = check(setup)
    assert (via, answer_) == ("http", "unknown")
    assert "169.254.169.254 is a link-local" in error and "never called" in error, error
    assert not [a for a in connections if str(a[0]).startswith("169.254.")]


def test_a_host_off_the_allow_list_is_refused(setup, servers):
    server = servers(answer(b'{"state": "commit"}'))
    configure(setup, url=server.url, hosts=["localhost", f"127.0.0.1:{server.port + 1}"])
    via, answer_, error = check(setup)
    assert (via, answer_) == ("http", "unknown")
    assert f"127.0.0.1:{server.port} is not on the app's allow-list" in error, error
    assert server.requests == []


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked-by-close"])
def test_an_oversize_answer_is_refused(setup, servers, declared):
    big = b'{"state": "commit", "padding": "' + b"x" * (200 * 1024) + b'"}'
    server = servers(answer(big, length=declared))
    configure(setup, url=server.url, hosts=["127.0.0.1"])
    via, answer_, error = check(setup)
    assert (via, answer_) == ("http", "unknown")  # not "commit", though the body says so
    assert "larger than the limit of 16,384" in error, error
    assert len(server.requests) == 1


def test_a_private_address_is_refused_unless_the_cluster_allows_it(setup, servers):
    server = servers(answer(b'{"state": "rollback"}'))
    configure(setup, url=server.url, hosts=["127.0.0.1"], allow_private=False)
    via, answer_, error = check(setup)
    assert (via, answer_) == ("http", "unknown")
    assert "127.0.0.1 is a private or loopback address" in error and "does not allow" in error, error
    assert server.requests == []
    configure(setup, url=server.url, hosts=["127.0.0.1"], allow_private=True)
    assert check(setup) == ("http", "rollback", "")
    assert len(server.requests) == 1


def test_the_host_name_travels_while_the_checked_address_is_called(setup, servers):
    """A name is resolved and checked once; the request goes to that address with the name as Host."""
    server = servers(answer(b'{"state": "commit"}'))
    configure(setup, url=f"http://localhost:{server.port}/tx-check", hosts=["localhost"])
    via, answer_, error = check(setup)
    assert (via, answer_, error) == ("http", "commit", "")
    assert server.requests == [("/tx-check", f"localhost:{server.port}")]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://127.0.0.1:70/", "http://user:pw@127.0.0.1/x"])
def test_other_schemes_and_credentials_are_refused(setup, url):
    configure(setup, url=url, hosts=["127.0.0.1"])
    via, answer_, error = check(setup)
    assert (via, answer_) == ("http", "unknown") and "refused" in error, error
