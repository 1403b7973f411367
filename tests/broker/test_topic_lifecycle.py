"""The life of a topic on a running broker, as the control plane writes it into ZooKeeper: retired (new
messages refused, the backlog and prepared messages still go through), deleted (its data goes from the disk,
and a topic of the same name starts empty, also after a restart), deleted while the broker was down or in the
middle of a deletion (the next start finishes the job), and never deleted for an unreadable document."""

from __future__ import annotations

import pytest

from broker_core import protocol as p
from broker_core.client import BrokerError, Consumer, Producer
from broker_core.layout import LAYOUT, encode
from tests.broker.conftest import APP, SECRET, wait_for
from tests.broker.helpers import RawConsumer, Received
from tests.broker.tx_helpers import TOKEN, admin, drain, states

TOPIC, GROUP, AUDIT = "orders", "billing", "audit"


def provision(cluster, topic: str = TOPIC, *groups: str, **topic_fields) -> None:
    cluster.standard(topic)
    cluster.pv.topic(topic, transactional=True, **topic_fields)
    for group in groups or (GROUP,):
        cluster.pv.binding(topic, group, APP, delivery_limit=1, backoff_initial_ms=10, backoff_max_ms=10)


def delete_topic(cluster, topic: str = TOPIC) -> None:
    """As the control plane deprovisions a topic: its node, then its bindings and grants."""
    cluster.pv.delete(LAYOUT.topic(topic))
    for path in (LAYOUT.topic_bindings(topic), LAYOUT.topic_grants(topic)):
        if cluster.pv.exists(path):
            cluster.pv.delete(path)


def nothing_left(broker, topic: str = TOPIC) -> bool:
    tombstones = broker.data_dir / "deleted"
    return not (broker.data_dir / "topics" / topic).exists() and not (tombstones.is_dir() and any(tombstones.iterdir()))


def test_a_retired_topic_refuses_new_messages_but_delivers_its_backlog_and_commits_prepared_ones(cluster):
    provision(cluster)
    broker = cluster.broker(admin_token=TOKEN)
    with Producer(**cluster.client_kwargs()) as producer:
        backlog = producer.send_many(TOPIC, [b"a", b"b", b"c"])
        prepared = producer.prepare(TOPIC, b"tx")
        cluster.pv.topic(TOPIC, transactional=True, status="retired", revision=2)
        wait_for(lambda: drain(broker, TOPIC)["retired"], 2, "the broker to apply the retirement")

        with pytest.raises(BrokerError) as plain:
            producer.send(TOPIC, b"late")
        assert plain.value.code == p.E_TOPIC_RETIRED
        assert f"topic {TOPIC} is retired; new messages are refused" in plain.value.message
        with pytest.raises(BrokerError) as tx:
            producer.prepare(TOPIC, b"late tx")
        assert tx.value.code == p.E_TOPIC_RETIRED
        assert producer.end_transaction(prepared, True) == p.TX_COMMITTED

    got = Received()
    with Consumer(TOPIC, GROUP, got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: sorted(got.ids("c")) == sorted([*backlog, prepared.message_id]), 10,
                 "the backlog and the committed message")
        wait_for(lambda: drain(broker, TOPIC)["groups"][GROUP]["backlog"] == 0, 5, "the acks")
    assert drain(broker, TOPIC)["messages"] == 0


def test_a_deleted_topic_leaves_nothing_on_disk_and_comes_back_empty_after_a_restart(cluster):
    provision(cluster, TOPIC, GROUP, AUDIT)
    broker = cluster.broker(admin_token=TOKEN)
    raw = RawConsumer(broker.address, APP, SECRET, TOPIC, GROUP)
    raw.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            sent = producer.send_many(TOPIC, [b"%d" % i for i in range(4)])
            prepared = producer.prepare(TOPIC, b"tx").message_id
        wait_for(lambda: len(raw.deliveries) == 4, 5, "the deliveries")
        raw.nack([[seq, -1, "refused"] for seq, _, _, _ in raw.deliveries[:2]])  # delivery limit 1: dead letters
        folder = broker.data_dir / "topics" / TOPIC / "p0"  # partition 0 (issue 20)
        wait_for(lambda: (folder / "deadletter" / f"{GROUP}.dlq").exists(), 5, "the dead-letter file")
        before = drain(broker, TOPIC)
        assert (before["messages"], before["prepared"]) == (4, 1)
        assert before["groups"][GROUP] == {"bound": True, "backlog": 2, "in_flight": 2, "dead_letters": 2,
                                           "consumers": 1}
        assert any(folder.glob("*.log"))

        cluster.pv.delete(LAYOUT.topic(TOPIC))
        wait_for(lambda: raw.unsubscribed == [f"topic {TOPIC} was deleted"], 2, "the subscription to end")
        delete_topic(cluster)
        wait_for(lambda: nothing_left(broker), 5, "the topic's data to be deleted")
    finally:
        raw.close()
    gone = {"node_id": broker.node_id, "topic": TOPIC, "held": False, "retired": False, "revision": None,
            "grants": [], "messages": 0, "prepared": 0, "groups": {}}
    wait_for(lambda: drain(broker, TOPIC) == gone, 2, "the bindings' removal too")
    assert states(broker, [prepared, sent[0]]) == {prepared: p.TX_UNKNOWN, sent[0]: p.TX_UNKNOWN}
    with Producer(**cluster.client_kwargs(send_timeout=5)) as producer, pytest.raises(BrokerError) as refused:
        producer.send(TOPIC, b"after")
    assert refused.value.code == p.E_UNKNOWN_TOPIC

    broker.restart()
    assert nothing_left(broker)
    provision(cluster, TOPIC, GROUP, AUDIT)
    wait_for(lambda: drain(broker, TOPIC)["grants"] == [APP] and drain(broker, TOPIC)["groups"].keys() == {GROUP, AUDIT},
             2, "the topic to come back")
    again = drain(broker, TOPIC)
    assert (again["messages"], again["prepared"]) == (0, 0)
    assert all(g["backlog"] == 0 and g["dead_letters"] == 0 for g in again["groups"].values())
    got = Received()
    with Producer(**cluster.client_kwargs()) as producer, \
            Consumer(TOPIC, GROUP, got.handler("c"), **cluster.client_kwargs()):
        fresh = producer.send(TOPIC, b"fresh")
        wait_for(lambda: got.ids("c") == [fresh], 5, "the new message")
    status, listed = admin(broker, "GET", f"/admin/dlq?topic={TOPIC}&group={GROUP}", token=broker.admin_token)
    assert status == 200 and listed["dead_letters"] == []
    assert got.ids("c") == [fresh], "nothing of the deleted topic came back"


def test_what_was_deleted_while_the_broker_was_down_goes_when_it_starts(cluster):
    provision(cluster, TOPIC, GROUP)
    provision(cluster, "payments", GROUP, AUDIT)
    broker = cluster.broker(admin_token=TOKEN)
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many(TOPIC, [b"1", b"2"])
        producer.send_many("payments", [b"1", b"2", b"3"])
    wait_for(lambda: drain(broker, "payments")["groups"][GROUP]["backlog"] == 3, 5, "the backlog")
    broker.kill()  # a crash: what it held stays on its disk
    delete_topic(cluster, TOPIC)
    cluster.pv.delete(LAYOUT.binding("payments", GROUP))
    interrupted = broker.data_dir / "deleted" / "orders-0badc0de"  # a deletion a crash interrupted
    (interrupted / "deadletter").mkdir(parents=True)
    (interrupted / "00000000000000000001.log").write_bytes(b"x" * 100)

    broker.start()
    wait_for(lambda: nothing_left(broker), 5, "the deleted topic's data to go")
    assert drain(broker, TOPIC)["held"] is False
    payments = drain(broker, "payments")
    assert GROUP not in payments["groups"], "the removed binding's backlog is dropped"
    assert payments["groups"][AUDIT]["backlog"] == 3 and payments["messages"] == 3


def test_an_unreadable_topic_document_stops_the_topic_but_deletes_nothing(cluster):
    provision(cluster)
    broker = cluster.broker(admin_token=TOKEN)
    with Producer(**cluster.client_kwargs(send_timeout=5)) as producer:
        sent = producer.send_many(TOPIC, [b"1", b"2"])
        cluster.zk_client.set(cluster.chroot + LAYOUT.topic(TOPIC), b"{not json")
        wait_for(lambda: not drain(broker, TOPIC)["revision"], 2, "the broker to read the broken document")
        with pytest.raises(BrokerError) as refused:
            producer.send(TOPIC, b"x")
        assert refused.value.code == p.E_UNKNOWN_TOPIC
        assert (broker.data_dir / "topics" / TOPIC).is_dir() and drain(broker, TOPIC)["messages"] == 2
        provision(cluster)
        wait_for(lambda: drain(broker, TOPIC)["revision"] == 1, 2, "the repaired document")
    got = Received()
    with Consumer(TOPIC, GROUP, got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: sorted(got.ids("c")) == sorted(sent), 10, "the messages kept through the broken document")


def test_a_broker_on_another_clusters_chroot_deletes_nothing(cluster):
    provision(cluster)
    broker = cluster.broker(admin_token=TOKEN)
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many(TOPIC, [b"1", b"2"])
    cluster.zk_client.set(cluster.chroot + LAYOUT.META, encode({"layout_version": 2, "cluster": "someone-else"}))
    delete_topic(cluster)
    wait_for(lambda: "but its data is kept" in broker.log(), 5, "the broker to refuse the deletion")
    assert drain(broker, TOPIC)["messages"] == 2 and (broker.data_dir / "topics" / TOPIC).is_dir()
