"""ZooKeeper as the stack's own processes (Debian's zookeeper package): one standalone server, or an ensemble of
several on this machine (the multi-node profile, docs/deploy.md)."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path

from devstack.processes import spawn, stop_pid, wait_until

log = logging.getLogger("devstack")

JAVA_DIR = Path("/usr/share/java")
ZK_CLASSPATH = ":".join(
    str(JAVA_DIR / jar)
    for jar in (
        "zookeeper.jar",
        "zookeeper-jute.jar",
        "netty-handler.jar",
        "netty-common.jar",
        "netty-buffer.jar",
        "netty-codec.jar",
        "netty-resolver.jar",
        "netty-transport.jar",
        "netty-transport-native-unix-common.jar",
        "netty-transport-native-epoll.jar",
        "servlet-api.jar",
        "slf4j-api.jar",
        "slf4j-simple.jar",
    )
)


def zk_ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"ruok")
            return s.recv(8) == b"imok"
    except OSError:
        return False


def zk_mode(port: int) -> str | None:
    """What `srvr` says of the server on PORT: "standalone", "leader" or "follower" (None: not serving)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except OSError:
        return None
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def _zoo_cfg(zdir: Path, port: int, quorum: list[str] = ()) -> Path:
    """zoo.cfg of one server (and its myid in an ensemble: QUORUM lists `server.N=host:peer:election`)."""
    (zdir / "data").mkdir(parents=True, exist_ok=True)
    cfg = zdir / "zoo.cfg"
    cfg.write_text(
        "\n".join([
            "tickTime=500",
            "initLimit=10",
            "syncLimit=5",
            "minSessionTimeout=1000",
            f"dataDir={zdir / 'data'}",
            f"clientPort={port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,stat,srvr,mntr",
            "maxClientCnxns=0",
            *quorum,
            "",
        ])
    )
    return cfg


def _spawn_zookeeper(state: Path, name: str, cfg: Path) -> None:
    spawn(
        name,
        ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + str(cfg.parent), "-cp", ZK_CLASSPATH,
         "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
        state,
    )


def start_zookeeper(state: Path, port: int, name: str = "zookeeper") -> None:
    cfg = _zoo_cfg(state / name, port)
    if zk_ruok(port):
        return
    _spawn_zookeeper(state, name, cfg)
    wait_until(lambda: zk_ruok(port), 30, f"zookeeper on {port}")


@dataclass(frozen=True)
class Ensemble:
    """A ZooKeeper ensemble on this machine: server N (1-based) serves clients on client_ports[N-1] and talks
    to its peers on quorum_ports[2(N-1)] (followers to the leader) and quorum_ports[2(N-1)+1] (leader election)."""

    name: str
    client_ports: tuple[int, ...]
    quorum_ports: tuple[int, ...]

    def server(self, n: int) -> str:
        return f"{self.name}-{n}"

    @property
    def hosts(self) -> str:
        """The connection string every client of the ensemble is given (kazoo picks a live server)."""
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)


def start_zookeeper_node(state: Path, ensemble: Ensemble, n: int) -> None:
    """Start (or start again) server N of the ensemble; it joins the quorum on its own."""
    quorum = [f"server.{i + 1}=127.0.0.1:{ensemble.quorum_ports[2 * i]}:{ensemble.quorum_ports[2 * i + 1]}"
              for i in range(len(ensemble.client_ports))]
    zdir = state / ensemble.server(n)
    cfg = _zoo_cfg(zdir, ensemble.client_ports[n - 1], quorum)
    (zdir / "data" / "myid").write_text(f"{n}\n")
    if zk_mode(ensemble.client_ports[n - 1]) is None:
        _spawn_zookeeper(state, ensemble.server(n), cfg)


def start_zookeeper_ensemble(state: Path, ensemble: Ensemble, timeout: float = 60) -> None:
    """Start every server of the ensemble and wait until each serves as leader or follower."""
    for n in range(1, len(ensemble.client_ports) + 1):
        start_zookeeper_node(state, ensemble, n)
    for port in ensemble.client_ports:
        wait_until(lambda port=port: zk_mode(port) in ("leader", "follower"), timeout,
                   f"zookeeper on {port} to join its ensemble")
    log.info("zookeeper ensemble %s serving on %s", ensemble.name, ensemble.hosts)


def stop_zookeeper_ensemble(state: Path, ensemble: Ensemble) -> None:
    for n in range(1, len(ensemble.client_ports) + 1):
        stop_zookeeper(state, ensemble.server(n))


def stop_zookeeper(state: Path, name: str = "zookeeper") -> None:
    stop_pid(state / "pids" / f"{name}.pid", name)
