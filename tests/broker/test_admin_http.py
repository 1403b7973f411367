"""The broker's HTTP side: who may call it. Every path but /healthz and /metrics needs the admin token, checked
from the request's head before its body is read; the token comes from the environment or a file, never argv."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from broker_core.client import Producer
from broker_core.node.options import parse
from tests.broker.conftest import APP, ROOT, TOKEN_VAR
from tests.broker.tx_helpers import TOKEN, admin, states

TOPIC = "orders"
PROTECTED = [  # (method, path) of every protected endpoint, and a path no endpoint has
    ("GET", "/stats"),
    ("GET", f"/deadletters?topic={TOPIC}&group=billing"),
    ("GET", "/admin/tx/prepared"),
    ("GET", "/admin/tx/state?ids=x"),
    ("POST", "/admin/tx/check"),
    ("POST", "/admin/tx/resolve"),
    ("GET", f"/admin/dlq?topic={TOPIC}&group=billing"),
    ("POST", "/admin/dlq/redrive"),
    ("GET", "/no-such-path"),
]


def setup(cluster, **broker_kw):
    cluster.standard(TOPIC)
    cluster.pv.topic(TOPIC, transactional=True, tx_check={"delay_s": 60})
    cluster.pv.binding(TOPIC, "billing", APP)
    return cluster.broker(**broker_kw)


def get(broker, path: str, token: str | None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{broker.metrics_port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def raw_request(port: int, method: str, path: str, headers: dict[str, str], body_part: bytes,
                timeout: float = 5) -> tuple[int, bytes]:
    """Send a request's head and only `body_part` of its body, then read the answer without sending more.
    Returns (status, whole answer); the socket timeout fails the call if no answer comes while the body is
    still incomplete (the broker would wait 10 s for the rest of a body it reads)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: broker\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.encode() + b"\r\n" + body_part)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0].decode()
    assert status_line.startswith("HTTP/1.1 "), answer[:200]
    return int(status_line.split()[1]), answer


def test_every_endpoint_but_healthz_and_metrics_refuses_without_the_right_token(cluster):
    broker = setup(cluster, admin_token=TOKEN)
    for path in ("/healthz", "/metrics"):
        assert get(broker, path, None)[0] == 200
    for method, path in PROTECTED:
        for token in (None, "wrong-token", TOKEN + "x", TOKEN[:-1]):
            if method == "GET":
                status, headers, body = get(broker, path, token)
            else:
                status, answer = admin(broker, method, path, {}, token=token)
                body, headers = json.dumps(answer).encode(), {"WWW-Authenticate": "Bearer"}
            assert status == 401, (method, path, token, status)
            assert json.loads(body)["error"] == "unauthorized" and "Bearer" in headers.get("WWW-Authenticate", "")
    # the right token opens them
    stats = json.loads(get(broker, "/stats", TOKEN)[2])
    assert stats["node_id"] == broker.node_id and "topics" in stats
    assert get(broker, "/admin/tx/prepared", TOKEN)[0] == 200
    assert get(broker, "/no-such-path", TOKEN)[0] == 404


def test_a_refused_request_is_answered_with_its_body_unread(cluster):
    broker = setup(cluster, admin_token=TOKEN)
    with Producer(**cluster.client_kwargs()) as producer:
        prepared = producer.prepare(TOPIC, b"x", message_type="order.created").message_id
    decision = json.dumps({"decisions": [{"message_id": prepared, "decision": "commit", "reason": "manual"}]})
    for method, path in PROTECTED:
        for auth in ({}, {"Authorization": "Bearer wrong-token"}):
            # announce 10 MB, send 64 KiB of it and wait: the 401 comes though the body never will
            status, answer = raw_request(broker.metrics_port, method, path,
                                         {**auth, "Content-Length": str(10_000_000)}, b"{" + b" " * 65535)
            assert status == 401, (method, path, auth, answer[:300])
            assert b'"unauthorized"' in answer
    # a whole, valid body with a wrong token changes nothing: it is never read
    status, _ = raw_request(broker.metrics_port, "POST", "/admin/tx/resolve",
                            {"Authorization": "Bearer wrong-token", "Content-Length": str(len(decision))},
                            decision.encode())
    assert status == 401
    assert states(broker, [prepared]) == {prepared: "prepared"}
    # the right token and a body over the limit: 413, also before the body is read
    status, answer = raw_request(broker.metrics_port, "POST", "/admin/tx/resolve",
                                 {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(10_000_000)},
                                 b" " * 65536)
    assert status == 413 and b'"too_large"' in answer
    status, answer = raw_request(broker.metrics_port, "POST", "/admin/tx/resolve",
                                 {"Authorization": f"Bearer {TOKEN}", "Transfer-Encoding": "chunked"}, b"")
    assert status == 411 and b"Content-Length" in answer
    # and the right token with the whole body works
    status, answer = raw_request(broker.metrics_port, "POST", "/admin/tx/resolve",
                                 {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(len(decision))},
                                 decision.encode())
    assert status == 200, answer
    assert states(broker, [prepared]) == {prepared: "committed"}


def test_a_broker_without_a_token_refuses_every_protected_endpoint(cluster):
    broker = setup(cluster, admin_token="")
    assert get(broker, "/healthz", None)[0] == 200
    for method, path in PROTECTED:
        for token in (None, "", "anything"):
            status, answer = admin(broker, method, path, {} if method == "POST" else None, token=token)
            assert status == 403 and answer["error"] == "admin_disabled", (path, token, answer)
            assert "SWITCHYARD_BROKER_ADMIN_TOKEN" in answer["message"]


def test_the_token_comes_from_a_mode_600_file_and_never_from_argv(cluster, tmp_path):
    token_file = tmp_path / "broker-admin-token"
    token_file.write_text("token-from-a-file\n")
    token_file.chmod(0o600)
    broker = setup(cluster, admin_token="", env={TOKEN_VAR + "_FILE": str(token_file)})
    assert get(broker, "/stats", "token-from-a-file")[0] == 200
    assert get(broker, "/stats", None)[0] == 401
    cmdline = open(f"/proc/{broker.proc.pid}/cmdline", "rb").read()
    assert b"token-from-a-file" not in cmdline and str(token_file).encode() not in cmdline

    token_file.chmod(0o644)  # readable by others: the broker refuses to start, saying how to fix it
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    env[TOKEN_VAR + "_FILE"] = str(token_file)
    out = subprocess.run([sys.executable, "-m", "broker_core", "--cluster", "c", "--zk", "127.0.0.1:1"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and f"chmod 600 {token_file}" in out.stderr


def test_the_token_is_refused_on_the_command_line_and_in_the_config_file(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse(["--cluster", "c", "--zk", "h:1", "--admin-token", "visible-in-ps"], environ={})
    err = capsys.readouterr().err
    assert "not accepted on the command line" in err and "SWITCHYARD_BROKER_ADMIN_TOKEN_FILE" in err
    assert "visible-in-ps" not in err
    config = tmp_path / "broker.toml"
    config.write_text('admin_token = "in-a-file-anyone-may-read"\n')
    with pytest.raises(ValueError, match="not accepted in a config file"):
        parse(["--config", str(config), "--cluster", "c", "--zk", "h:1"], environ={})
    opts = parse(["--cluster", "c", "--zk", "h:1"], environ={TOKEN_VAR: "from-env"})
    assert opts.admin_token == "from-env" and "from-env" not in repr(opts)
