"""The broker in ZooKeeper: its ephemeral registration, and watches on what the control plane writes.

kazoo runs callbacks on its own thread; every result is handed to the event loop through `notify`
(the node passes `loop.call_soon_threadsafe`), so `ClusterState` is only touched on the loop.

- Registration: an ephemeral node `/brokers/<node-id>` (docs/zookeeper-layout.md). kazoo does not
  re-create ephemeral nodes after a lost session, so every CONNECTED event (and a periodic check)
  makes sure it exists and belongs to the current session; a node left by an earlier process of
  the same broker (killed before its session expired) is replaced.
- Watches: `/topics/*`, `/apps/*`, `/bindings/*/*`, `/grants/*/*`, `/placement/*`, `/brokers/*` and
  `/partition-state/*/*` (with each node's version: elections write it by compare-and-set), children and data. Roots that
  do not exist yet are watched for creation. kazoo's watch recipes re-read after a lost session.

The client connects without a chroot and prefixes paths itself. On a secured cluster
(docs/security.md) the control plane creates the chroot and `/brokers`; the broker authenticates with
its own digest credential (`credential`, from `SWITCHYARD_ZK_BROKER_AUTH`), may only read what the
control plane wrote, and creates its registration readable by anyone (discovery) and writable by itself.
Without a credential it connects anonymously, as on a cluster that has no ACLs yet.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoAuthError, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

from broker_core.cluster.zk_acl import ZkCredential, broker_node_acl
from broker_core.layout import LAYOUT, LAYOUT_VERSION, encode

log = logging.getLogger("broker_core.membership")

Apply = Callable[..., None]  # (kind, key, document or None[, unreadable]): ClusterState.apply
SUPPORTED_LAYOUT_VERSIONS = frozenset({1, 2, LAYOUT_VERSION})  # 1: one `secret_hash` per app


class ZkMembership:
    def __init__(
        self,
        hosts: str,
        chroot: str,
        node_id: str,
        info: dict,
        *,
        notify: Callable[..., object],
        apply: Apply,
        on_synced: Callable[[], None] | None = None,
        on_meta: Callable[[dict | None], None] | None = None,
        session_timeout: float = 10.0,
        credential: ZkCredential | None = None,
    ):
        self.root = chroot.rstrip("/")
        self.node_id = node_id
        self.info = info
        self.notify = notify
        self.apply = apply
        self.on_synced = on_synced  # handed to the loop after the first full read
        self.on_meta = on_meta  # handed the /meta document (None: absent or unreadable) whenever it changes
        self.node_acl = broker_node_acl(credential.acl_id) if credential else OPEN_ACL_UNSAFE
        self.client = KazooClient(
            hosts=hosts,
            timeout=session_timeout,
            auth_data=credential.auth_data if credential else None,
            connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
        )
        self.client.add_listener(self._on_state)
        self._lock = threading.RLock()
        self._watched: set[str] = set()
        self._children_live: set[str] = set()
        self._setup_lock = threading.Lock()
        self._want_registered = False
        self.connected = threading.Event()
        self.synced = threading.Event()  # the first full read of the layout has been handed over
        self.registrations = 0
        self.sessions_lost = 0

    def path(self, relative: str) -> str:
        return self.root + relative

    # -- lifecycle (blocking: call from a worker thread) ------------------------------------

    def start(self, timeout: float) -> bool:
        """Connect and read the layout; True when done within `timeout`. Keeps trying after that."""
        self.client.start_async()
        return self.synced.wait(timeout)

    def register(self) -> None:
        """From now on, keep `/brokers/<node-id>` registered whenever the session is up."""
        self._want_registered = True
        if self.client.connected:
            self.ensure_registered()

    def stop(self) -> None:
        self._want_registered = False
        try:
            self.client.stop()
            self.client.close()
        except Exception as exc:  # stopping must not fail a shutdown
            log.warning("zookeeper stop: %s", exc)

    # -- session ----------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: never block here
        if state == KazooState.LOST:
            if not self._want_registered:
                return  # our own stop()
            self.sessions_lost += 1
            self.connected.clear()
            log.warning("zookeeper session lost; will register again when connected")
        elif state == KazooState.SUSPENDED:
            self.connected.clear()
            log.warning("zookeeper connection suspended")
        elif state == KazooState.CONNECTED:
            self.connected.set()
            self.client.handler.spawn(self._on_connected)

    def _on_connected(self) -> None:
        with self._setup_lock:
            try:
                try:
                    self.client.ensure_path(self.path(LAYOUT.BROKERS))
                except NoAuthError:
                    log.warning("%s does not exist and this broker may not create it: the control plane creates "
                                "it (push to the cluster, or `manage.py secure_zookeeper`)", self.path(LAYOUT.BROKERS))
                if not self.synced.is_set():
                    self._watch_all()
                    if self.on_synced is not None:
                        self.notify(self.on_synced)  # before `synced`: the loop sees it before start() returns
                    self.synced.set()
                if self._want_registered:
                    self.ensure_registered()
            except KazooException as exc:
                log.warning("zookeeper set-up after connect failed (%s); the periodic check retries", exc)

    def check(self) -> None:
        """Periodic (from the node, every few seconds): finish a set-up that failed, and make sure
        the registration stands (seed 003: a thread checks the session and registers again)."""
        if self.client.connected:
            self._on_connected()

    def ensure_registered(self) -> bool:
        """Make sure our ephemeral node exists and belongs to this session. Safe to call any time."""
        if not self._want_registered:
            return False
        path = self.path(LAYOUT.broker(self.node_id))
        session = self.client.client_id[0] if self.client.client_id else None
        with self._lock:
            try:
                try:
                    _, stat = self.client.get(path)
                    if stat.ephemeralOwner == session:
                        return True
                    self.client.delete(path)  # left by an earlier session of this broker
                except NoNodeError:
                    pass
                self.client.create(path, encode(self.info), acl=self.node_acl, ephemeral=True, makepath=True)
                self.registrations += 1
                log.info("registered %s", path)
                return True
            except NodeExistsError:
                return False  # a concurrent call won; the next check will confirm
            except KazooException as exc:
                log.warning("could not register %s: %s", path, exc)
                return False

    # -- watches ----------------------------------------------------------------------------

    def _watch_all(self) -> None:
        self.client.DataWatch(self.path(LAYOUT.META), self._on_meta)
        self._watch_children(LAYOUT.TOPICS, lambda name: self._watch_leaf("topic", (name,), LAYOUT.topic(name)))
        self._watch_children(LAYOUT.BROKERS, lambda node: self._watch_leaf("broker", (node,), LAYOUT.broker(node)))
        self._watch_children(LAYOUT.PLACEMENT,
                             lambda name: self._watch_leaf("placement", (name,), LAYOUT.placement(name)))
        self._watch_children(LAYOUT.PARTITION_STATE, lambda topic: self._watch_children(
            f"{LAYOUT.PARTITION_STATE}/{topic}",
            lambda pid: self._watch_leaf("pstate", (topic, pid), LAYOUT.partition_state(topic, pid))))
        self._watch_children(LAYOUT.APPS, lambda app: self._watch_leaf("app", (app,), LAYOUT.app(app)))
        self._watch_children(LAYOUT.BINDINGS, lambda topic: self._watch_children(
            LAYOUT.topic_bindings(topic),
            lambda group: self._watch_leaf("binding", (topic, group), LAYOUT.binding(topic, group))))
        self._watch_children(LAYOUT.GRANTS, lambda topic: self._watch_children(
            LAYOUT.topic_grants(topic),
            lambda app: self._watch_leaf("grant", (topic, app), LAYOUT.grant(topic, app))))

    def _on_meta(self, data, stat) -> None:
        doc = None
        if stat is not None and data:  # (no /meta yet: the control plane writes it before its first object)
            try:
                doc = json.loads(data)
            except ValueError:
                doc = None
        if self.on_meta is not None:
            self.notify(self.on_meta, doc if isinstance(doc, dict) else None)
        if stat is None or not data:
            return
        version = doc.get("layout_version") if isinstance(doc, dict) else None
        if version not in SUPPORTED_LAYOUT_VERSIONS:
            log.error("%s says layout version %r; this broker reads %s. Upgrade the broker before the layout.",
                      self.path(LAYOUT.META), version, sorted(SUPPORTED_LAYOUT_VERSIONS))

    def _watch_children(self, relative: str, on_child: Callable[[str], None]) -> None:
        """Call on_child for each child of `relative`, now and whenever one appears (even if the
        node itself appears only later)."""
        path = self.path(relative)
        with self._lock:
            if path in self._watched:
                return
            self._watched.add(path)

        def on_children(children: list[str]) -> None:
            for child in children:
                if f"{path}/{child}" not in self._watched:
                    on_child(child)

        def on_exists(data, stat) -> bool | None:
            with self._lock:
                if stat is None:
                    self._children_live.discard(path)
                    if relative.count("/") > 1:  # a /bindings/<topic> or /grants/<topic> went away
                        self._watched.discard(path)
                        return False
                    return None
                if path in self._children_live:
                    return None
                self._children_live.add(path)
            self.client.ChildrenWatch(path, on_children)
            return None

        self.client.DataWatch(path, on_exists)

    def _watch_leaf(self, kind: str, key: tuple[str, ...], relative: str) -> None:
        path = self.path(relative)
        with self._lock:
            if path in self._watched:
                return
            self._watched.add(path)

        def on_data(data, stat) -> bool | None:
            if stat is None:
                with self._lock:
                    self._watched.discard(path)
                self.notify(self.apply, kind, key, None)
                return False
            try:
                doc = json.loads(data) if data else {}
                if not isinstance(doc, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                log.error("%s: unreadable document (%s); treated as absent (its data is kept)", path, exc)
                self.notify(self.apply, kind, key, None, True)
                return None
            if kind == "pstate":  # its version: leader elections write it by compare-and-set (replication/)
                doc["version"] = stat.version
            self.notify(self.apply, kind, key, doc)
            return None

        self.client.DataWatch(path, on_data)
