"""Read many znodes fast: GetData requests pipelined in windows over one short ZooKeeper session.

kazoo spends about a quarter of a millisecond of Python per request (a wake-up byte, a select, a send
and a receive each), so ten thousand reads take seconds however they are queued. Reconcile reads
every object of a cluster, so it speaks the wire protocol directly here — with kazoo's own request
and reply classes — writing a window of requests at once and parsing the replies from a buffered
stream. Read-only: nothing here writes, and the session is closed at the end. The session authenticates
with the control plane's digest credential first (the nodes under /apps are readable by no one else).
"""

from __future__ import annotations

import random
import socket
import struct

from kazoo.protocol.serialization import (
    Auth,
    Close,
    Connect,
    GetACL,
    GetData,
    int_struct,
    reply_header_struct,
)

from apps.clusters.zookeeper import ZooKeeperUnreachable

NO_NODE = -101
NO_AUTH = -102
AUTH_XID = -4
WINDOW = 500  # below ZooKeeper's default globalOutstandingLimit (1000), so the server never stops reading


def _hosts(connect: str) -> list[tuple[str, int]]:
    hosts = []
    for part in connect.split("/", 1)[0].split(","):
        host, _, port = part.strip().rpartition(":")
        hosts.append((host or part, int(port or 2181)))
    random.shuffle(hosts)
    return hosts


def _frame(xid: int | None, request) -> bytes:
    body = bytearray()
    if xid is not None:
        body += int_struct.pack(xid)
    if request.type is not None:
        body += int_struct.pack(request.type)
    body += request.serialize()
    return int_struct.pack(len(body)) + bytes(body)


def _read_exact(stream, size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) != size:
        raise ConnectionError("ZooKeeper closed the connection")
    return data


def _read_frame(stream) -> bytes:
    (length,) = int_struct.unpack(_read_exact(stream, 4))
    return _read_exact(stream, length)


def read_data(connect: str, paths: list[str], timeout: float,
              auth: list[tuple[str, str]] | None = None) -> dict[str, tuple[bytes, int] | None]:
    """path → (data, data version), or None for a node that does not exist."""
    return _read(connect, paths, timeout, auth, lambda p: GetData(p, False),
                 lambda reply, offset: _data(GetData.deserialize(reply, offset)))


def read_acls(connect: str, paths: list[str], timeout: float, auth: list[tuple[str, str]] | None = None) -> dict:
    """path → its ACL (a list of kazoo ACL), or None for a node that does not exist."""
    return _read(connect, paths, timeout, auth, GetACL, lambda reply, offset: GetACL.deserialize(reply, offset)[0],
                 no_auth=[])  # an ACL that shuts the control plane out reads as an empty one: drift


def _data(found) -> tuple[bytes, int]:
    data, stat = found
    return data or b"", stat.version


def _read(connect, paths, timeout, auth, request, parse, no_auth=None) -> dict:
    errors = []
    for host, port in _hosts(connect):
        try:
            return _read_from(host, port, paths, timeout, auth or [], request, parse, no_auth)
        except (OSError, ConnectionError, struct.error) as exc:
            errors.append(f"{host}:{port}: {exc}")
    raise ZooKeeperUnreachable(f"ZooKeeper at {connect} did not answer: {'; '.join(errors)}")


def _read_from(host: str, port: int, paths: list[str], timeout: float, auth, request, parse, no_auth) -> dict:
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = sock.makefile("rb", buffering=1 << 20)
        sock.sendall(_frame(None, Connect(0, 0, int(timeout * 1000), 0, b"\x00" * 16, False)))
        session, _ = Connect.deserialize(_read_frame(stream), 0)
        if session.time_out <= 0:
            raise ConnectionError("ZooKeeper refused the session")
        for scheme, credential in auth:
            sock.sendall(_frame(AUTH_XID, Auth(0, scheme, credential)))
            got_xid, _zxid, err = reply_header_struct.unpack_from(_read_frame(stream), 0)
            if got_xid != AUTH_XID or err != 0:
                raise ConnectionError(f"ZooKeeper refused the {scheme} credential (error {err})")
        out: dict = {}
        xid = 0
        for start in range(0, len(paths), WINDOW):
            window = paths[start:start + WINDOW]
            sock.sendall(b"".join(_frame(xid + 1 + i, request(p)) for i, p in enumerate(window)))
            for path in window:
                xid += 1
                reply = _read_frame(stream)
                got_xid, _zxid, err = reply_header_struct.unpack_from(reply, 0)
                if got_xid != xid:
                    raise ConnectionError(f"reply {got_xid} out of order (expected {xid})")
                if err == NO_NODE:
                    out[path] = None
                elif err == NO_AUTH and no_auth is not None:
                    out[path] = no_auth
                elif err != 0:
                    raise ConnectionError(f"ZooKeeper error {err} reading {path}")
                else:
                    out[path] = parse(reply, reply_header_struct.size)
        try:
            sock.sendall(_frame(xid + 1, Close()))
        except OSError:
            pass  # the session expires on its own
        return out
