"""ZooKeeper I/O for provisioning: one long-lived client per ensemble, every call bounded in time.

A worker keeps its client between tasks (connecting costs more than writing a node). Any sign that
the ensemble is gone — not connected, a lost connection, a call that does not answer in time —
drops the client and raises ZooKeeperUnreachable; the next call connects afresh.

The client authenticates with the control plane's digest credential, and every node it creates carries
the ACL of broker_core.cluster.zk_acl (docs/security.md): brokers read, anonymous clients read only /meta and
/brokers, and nobody but the control plane writes.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from django.conf import settings
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from apps.clusters.zookeeper import ZooKeeperUnreachable, acl_policy, control_auth_data
from apps.provisioning import zkbulk
from broker_core.layout import LAYOUT

log = logging.getLogger(__name__)

BULK_THRESHOLD = 200
_clients: dict[str, KazooClient] = {}
_lock = threading.Lock()
_CONNECTION_ERRORS = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, OperationTimeoutError,
                      KazooTimeoutError)
_RACE_ERRORS = (NodeExistsError, BadVersionError, NoNodeError, NotEmptyError)


class WriteConflict(Exception):
    """Someone else kept changing the node while we wrote it."""


def _timeout() -> float:
    return float(settings.SWITCHYARD_ZK_TIMEOUT)


def client_for(connect: str) -> KazooClient:
    with _lock:
        client = _clients.get(connect)
        if client is not None and client.connected:
            return client
        if client is not None:
            _close(client)
            _clients.pop(connect, None)
        client = KazooClient(hosts=connect, timeout=_timeout(), auth_data=control_auth_data(),
                             connection_retry={"max_tries": 1, "delay": 0.1}, command_retry={"max_tries": 0})
        try:
            client.start(timeout=_timeout())
        except Exception as exc:  # kazoo raises several kinds when nothing answers
            _close(client)
            raise ZooKeeperUnreachable(f"ZooKeeper at {connect} did not answer within {_timeout():.0f}s: "
                                       f"{exc or type(exc).__name__}") from exc
        _clients[connect] = client
        return client


def drop(connect: str) -> None:
    with _lock:
        client = _clients.pop(connect, None)
    if client is not None:
        _close(client)


def close_all() -> None:
    for connect in list(_clients):
        drop(connect)


def _close(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # closing a broken client must never mask the real error
        log.debug("closing a kazoo client failed", exc_info=True)


@dataclass
class Node:
    data: bytes
    version: int


class Session:
    """ZooKeeper calls for one cluster: paths are relative to its chroot (which may not exist yet)."""

    def __init__(self, connect: str, chroot: str):
        self.connect = connect
        self.root = chroot.rstrip("/")
        self.policy = acl_policy()
        self.zk = client_for(connect)
        self._known_dirs: set[str] = set()

    def abs(self, path: str) -> str:
        return f"{self.root}{path}"

    def relative(self, absolute: str) -> str:
        """The path under the chroot; "" for the chroot itself and for its ancestors."""
        return absolute[len(self.root):] if absolute.startswith(self.root + "/") else ""

    def acl_of(self, absolute: str):
        return self.policy.for_path(self.relative(absolute))

    def ensure_skeleton(self) -> None:
        """The chroot and /brokers, each with its ACL: brokers may not create them on a secured ensemble."""
        missing = self._missing_dirs(LAYOUT.BROKERS + "/x")
        for result in [self.zk.create_async(d, b"", acl=self.acl_of(d)) for d in missing]:
            try:
                self._wait(result)
            except NodeExistsError:
                pass
        self._known_dirs.update(missing)

    def _wait(self, async_result):
        try:
            return async_result.get(timeout=_timeout())
        except _CONNECTION_ERRORS as exc:
            drop(self.connect)
            raise ZooKeeperUnreachable(f"ZooKeeper at {self.connect} stopped answering: "
                                       f"{exc or type(exc).__name__}") from exc

    # --- reads ------------------------------------------------------------------------

    def read(self, path: str) -> Node | None:
        try:
            data, stat = self._wait(self.zk.get_async(self.abs(path)))
        except NoNodeError:
            return None
        return Node(data or b"", stat.version)

    def read_many(self, paths: list[str]) -> dict[str, Node | None]:
        """Pipelined: every request goes out before the first answer is awaited. Past a few hundred
        paths the bulk reader (zkbulk) takes over: kazoo's per-request overhead dominates there."""
        if len(paths) > BULK_THRESHOLD:
            found = zkbulk.read_data(self.connect, [self.abs(p) for p in paths], _timeout(), control_auth_data())
            return {p: (Node(*found[self.abs(p)]) if found[self.abs(p)] is not None else None) for p in paths}
        pending = [(p, self.zk.get_async(self.abs(p))) for p in paths]
        out: dict[str, Node | None] = {}
        for path, result in pending:
            try:
                data, stat = self._wait(result)
                out[path] = Node(data or b"", stat.version)
            except NoNodeError:
                out[path] = None
        return out

    def read_acls(self, paths: list[str]) -> dict[str, list | None]:
        """path (relative; "" is the chroot) → the node's ACL, None when it does not exist. A node whose ACL
        shuts the control plane out reads as an empty ACL (it is drift either way)."""
        if len(paths) > BULK_THRESHOLD:
            found = zkbulk.read_acls(self.connect, [self.abs(p) for p in paths], _timeout(), control_auth_data())
            return {p: found[self.abs(p)] for p in paths}
        pending = [(p, self.zk.get_acls_async(self.abs(p))) for p in paths]
        out: dict[str, list | None] = {}
        for path, result in pending:
            try:
                out[path] = list(self._wait(result)[0])
            except NoNodeError:
                out[path] = None
            except NoAuthError:
                out[path] = []
        return out

    def set_acls(self, paths: list[str]) -> dict[str, Exception | None]:
        """Give each node (relative path) the ACL the policy prescribes; path → error or None."""
        pending = [(p, self.zk.set_acls_async(self.abs(p), self.policy.for_path(p))) for p in paths]
        out: dict[str, Exception | None] = {}
        for path, result in pending:
            try:
                self._wait(result)
                out[path] = None
            except (NoNodeError, NoAuthError) as exc:
                out[path] = exc
        return out

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self._wait(self.zk.get_children_async(self.abs(path))))
        except NoNodeError:
            return []

    def children_many(self, paths: list[str]) -> dict[str, list[str]]:
        pending = [(p, self.zk.get_children_async(self.abs(p))) for p in paths]
        out = {}
        for path, result in pending:
            try:
                out[path] = sorted(self._wait(result))
            except NoNodeError:
                out[path] = []
        return out

    # --- writes -----------------------------------------------------------------------

    def _missing_dirs(self, path: str) -> list[str]:
        """Absolute ancestors of `path` (chroot included) that do not exist yet, outermost first."""
        unknown = [a for a in self._ancestors(path) if a not in self._known_dirs]
        checks = [(a, self.zk.exists_async(a)) for a in unknown]
        missing = []
        for a, result in checks:
            if self._wait(result) is None:
                missing.append(a)
            else:
                self._known_dirs.add(a)
        return missing

    def put(self, path: str, data: bytes, attempts: int = 5) -> Node:
        """Write one object atomically: its missing parents and the node in one transaction."""
        for _ in range(attempts):
            current = self.read(path)
            if current is not None and current.data == data:
                return current
            tx = self.zk.transaction()
            if current is None:
                for directory in self._missing_dirs(path):
                    tx.create(directory, b"", acl=self.acl_of(directory))
                tx.create(self.abs(path), data, acl=self.policy.for_path(path))
            else:
                tx.set_data(self.abs(path), data, version=current.version)
            results = self._wait(tx.commit_async())
            failure = _first_failure(results)
            if failure is None:
                return Node(data, 0 if current is None else current.version + 1)
            if not isinstance(failure, _RACE_ERRORS):
                raise failure
            self._known_dirs.clear()  # a parent may have gone away under us
        raise WriteConflict(f"{path} kept changing while it was written")

    def put_many(self, items: dict[str, bytes]) -> dict[str, Exception | None]:
        """Write many objects, pipelined; each is its own transaction. Returns path → error or None."""
        current = self.read_many(list(items))
        wanted = {a for p in items if current[p] is None for a in self._ancestors(p)} - self._known_dirs
        wanted = sorted(wanted, key=lambda a: (a.count("/"), a))  # parents before children
        checks = [(a, self.zk.exists_async(a)) for a in wanted]
        missing = [a for a, result in checks if self._wait(result) is None]
        # One session's requests are applied in order, so parents land before their children.
        for result in [self.zk.create_async(d, b"", acl=self.acl_of(d)) for d in missing]:
            try:
                self._wait(result)
            except NodeExistsError:
                pass
        self._known_dirs.update(wanted)
        pending = []
        for path, data in items.items():
            node = current[path]
            if node is not None and node.data == data:
                continue
            tx = self.zk.transaction()
            if node is None:
                tx.create(self.abs(path), data, acl=self.policy.for_path(path))
            else:
                tx.set_data(self.abs(path), data, version=node.version)
            pending.append((path, tx.commit_async()))
        out: dict[str, Exception | None] = {p: None for p in items}
        retry = []
        for path, result in pending:
            failure = _first_failure(self._wait(result))
            if isinstance(failure, _RACE_ERRORS):
                retry.append(path)
            elif failure is not None:
                out[path] = failure
        for path in retry:  # raced with someone: do these one by one
            try:
                self.put(path, items[path])
            except (WriteConflict, *_RACE_ERRORS) as exc:
                out[path] = exc
        return out

    def _ancestors(self, path: str) -> list[str]:
        parts = self.abs(path).strip("/").split("/")[:-1]
        return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]

    def delete(self, path: str) -> bool:
        """Delete one object node (not its parents). False when it was already gone."""
        try:
            self._wait(self.zk.delete_async(self.abs(path)))
            return True
        except NoNodeError:
            return False

    def delete_empty(self, paths: list[str]) -> None:
        """Delete each container of `paths` that has no children (left alone when it has some)."""
        for path in paths:
            try:
                self._wait(self.zk.delete_async(self.abs(path)))
            except (NoNodeError, NotEmptyError):
                pass
            self._known_dirs.discard(self.abs(path))


def _first_failure(results) -> Exception | None:
    if not isinstance(results, list):
        return None
    failures = [r for r in results if isinstance(r, Exception)]
    real = [r for r in failures if not isinstance(r, RolledBackError)]
    return (real or failures or [None])[0]
