"""The trace index job on a Spark standalone cluster (issue 20, item 4): two brokers of one cluster write their
trace files into one shared folder (each its own sub-folder, as an NFS mount would give every broker and Spark
worker), and an index run of the control plane -- the runner the Celery task calls -- with
`SWITCHYARD_SPARK_MASTER=spark://...` finds the messages each broker stored."""

from __future__ import annotations

import httpx
import pytest

from apps.tracing.choices import RunState
from apps.tracing.models import IndexRun, TracedMessage
from apps.tracing.runner import run_index_build
from broker_core.client import Producer
from devstack.spark import SparkStandalone, start_spark_standalone, stop_spark_standalone
from tests.broker.conftest import PORT_BASE, STATE, cluster, wait_for, zk, zk_hosts  # noqa: F401  (broker fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

SPARK = SparkStandalone(master_port=PORT_BASE + 470, master_ui_port=PORT_BASE + 471, worker_ui_port=PORT_BASE + 472)


@pytest.fixture(scope="module")
def spark_master():
    state = STATE / "spark-standalone"
    url = start_spark_standalone(state, SPARK, cores=2, memory="1g")
    try:
        yield url
    finally:
        stop_spark_standalone(state)


def _trace_files(folder) -> list:
    return [p for p in folder.rglob("*") if p.is_file() and p.suffix == ".arrows"]


def test_the_index_job_on_a_standalone_master_finds_messages_traced_on_two_brokers(cluster, spark_master, settings,  # noqa: F811
                                                                                  make_user, tmp_path):
    shared = tmp_path / "shared-trace"
    cluster.standard("orders")
    brokers = [cluster.broker("--trace-dir", str(shared / f"node-{i}")) for i in range(2)]
    sent: dict[str, str] = {}  # message id -> the broker that stored it
    for broker in brokers:
        # one producer per broker, each pinned to it: every message is stored (and traced) by a known broker
        with Producer(**cluster.client_kwargs(brokers=[broker.address])) as producer:
            for i in range(30):
                sent[producer.send("orders", f"via {broker.node_id} #{i}".encode(), business_id=f"{broker.node_id}-{i}")] = \
                    broker.node_id
    for i, broker in enumerate(brokers):
        broker.stop()  # SIGTERM: its trace writer writes what it holds and closes its file
        assert _trace_files(shared / f"node-{i}"), f"broker {i} wrote no trace file into the shared folder"

    settings.SWITCHYARD_SPARK_MASTER = spark_master
    settings.SWITCHYARD_TRACE_INPUTS = [str(shared)]
    settings.SWITCHYARD_TRACE_INDEX_DIR = str(tmp_path / "index")
    run = IndexRun.objects.create(trigger="manual", requested_by=make_user("sre-spark", "sre"))
    run = run_index_build(run.pk)
    assert run.state == RunState.SUCCEEDED, f"{run.state}: {run.error}"
    # it ran on the standalone cluster, not in a local Spark of its own: the master lists it as a finished application
    master = httpx.get(f"http://127.0.0.1:{SPARK.master_ui_port}/json/", timeout=5).json()
    assert "switchyard-trace-index" in [app["name"] for app in master["completedapps"]], master["completedapps"]

    found = dict(TracedMessage.objects.filter(message_id__in=list(sent)).values_list("message_id", "broker"))
    assert set(found) == set(sent), f"{len(set(sent) - set(found))} of {len(sent)} messages missing from the index"
    assert {b.node_id for b in brokers} <= {found[m] for m in found}
    for message_id, node in sent.items():
        assert found[message_id] == node, f"{message_id} stored on {node}, indexed as stored on {found[message_id]}"
