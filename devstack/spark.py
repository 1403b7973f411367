"""A Spark standalone cluster (one master, one worker) started from the pyspark install, as the stack's own
processes: what the trace index job runs on with `--master spark://...` (docs/deploy.md)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyspark

from devstack.processes import port_open, spawn, stop_pid, wait_until

SPARK_CLASS = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"


@dataclass(frozen=True)
class SparkStandalone:
    """Ports of a standalone cluster: the master's RPC port (the URL jobs are given) and the two web UIs'."""

    master_port: int
    master_ui_port: int
    worker_ui_port: int

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"


def _environment(state: Path) -> dict[str, str]:
    return {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(state / "spark" / "local"),
        "SPARK_WORKER_DIR": str(state / "spark" / "work"),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_NO_DAEMONIZE": "1",
        # executors run the job's Python functions with this interpreter (the project's virtualenv)
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }


def start_spark_standalone(state: Path, cluster: SparkStandalone, cores: int = 2, memory: str = "1g") -> str:
    """Start the master and one worker (CORES cores, MEMORY for executors); returns the master URL once the worker
    has registered (the master's web UI lists it)."""
    env = _environment(state)
    for folder in ("local", "work"):
        (state / "spark" / folder).mkdir(parents=True, exist_ok=True)
    spawn("spark-master", [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                           "--port", str(cluster.master_port), "--webui-port", str(cluster.master_ui_port)],
          state, env)
    wait_until(lambda: port_open(cluster.master_port), 60, f"the Spark master on {cluster.master_port}")
    spawn("spark-worker", [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", cluster.url,
                           "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                           "--webui-port", str(cluster.worker_ui_port)], state, env)
    wait_until(lambda: _workers_alive(cluster) > 0, 60, "a Spark worker to register with the master")
    return cluster.url


def _workers_alive(cluster: SparkStandalone) -> int:
    """How many workers the master counts as alive (its web UI's JSON)."""
    try:
        state = httpx.get(f"http://127.0.0.1:{cluster.master_ui_port}/json/", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return 0
    return int(state.get("aliveworkers", 0))


def stop_spark_standalone(state: Path) -> None:
    stop_pid(state / "pids" / "spark-worker.pid", "spark-worker")
    stop_pid(state / "pids" / "spark-master.pid", "spark-master")
