"""Issue 20: transaction messages are replicated like any message. A prepare is acknowledged once `min_insync`
replicas hold it, and so is a commit or a rollback (`ReplicaTx`); a follower that was down gets them from the
leader's files; when the leader's disk is lost, its successor holds every acknowledged outcome (committed ones are
delivered, rolled-back ones never) and the messages still prepared, which a back-check (the admin API's resolve,
as the control plane calls it) or the producer's own end settles on the new leader."""

from __future__ import annotations

import concurrent.futures
import signal

import pytest

from broker_core.client import Consumer, Producer
from tests.broker.conftest import wait_for
from tests.broker.helpers import Received
from tests.broker.test_failover import state
from tests.broker.test_replication import in_sync, replicated
from tests.broker.tx_helpers import TOKEN, resolve, states


def tx_replicated(cluster, min_insync: int):
    """Two brokers holding the transactional topic `orders` (1 partition, replication factor 2), b0 leading and
    the follower in sync."""
    leader, follower = replicated(cluster, min_insync, admin_token=TOKEN, transactional=True,
                                  tx_check={"delay_s": 1})
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    return leader, follower


def lose_leader(cluster, leader, follower) -> None:
    """SIGKILL the leader and delete its data folder; wait until the follower leads."""
    leader.lose_disk()
    wait_for(lambda: state(cluster, 0)["leader"] == follower.node_id, 30, "the follower elected")


def delivered_after_marker(cluster, producer) -> list[str]:
    """Everything the group gets up to a plain marker message published now (in order)."""
    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        marker = producer.send("orders", b"marker", message_type="marker")
        wait_for(lambda: marker in got.ids("c"), 30, "the marker message")
    return [i for i in got.ids("c") if i != marker]


def test_acknowledged_outcomes_and_open_prepares_survive_the_leaders_disk(cluster):
    leader, follower = tx_replicated(cluster, min_insync=1)  # (the follower is in the ISR: it must hold each one)
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        committed, rolled_back, open_ = (producer.prepare("orders", b"tx %d" % i, message_type="paid")
                                         for i in range(3))
        assert producer.end_transaction(committed, commit=True) == "committed"
        assert producer.end_transaction(rolled_back, commit=False) == "rolled_back"
        following = follower.stats()["topics"]["orders"]["replication"]["following"]["0"]
        assert following["tx_ended"] == 2, "both ends applied on the follower before they were acknowledged"

        lose_leader(cluster, leader, follower)
        ids = [committed.message_id, rolled_back.message_id, open_.message_id]
        wait_for(lambda: states(follower, ids) == {ids[0]: "committed", ids[1]: "rolled_back", ids[2]: "prepared"},
                 20, "the new leader's transaction states")
        delivered = delivered_after_marker(cluster, producer)
        assert ids[0] in delivered and ids[1] not in delivered and ids[2] not in delivered

        # the message still open is settled on the new leader: by a back-check's answer, or by its producer
        assert [r["state"] for r in resolve(follower, [(ids[2], "commit")], reason="check")] == ["committed"]
        again = delivered_after_marker(cluster, producer)
        assert ids[2] in again and ids[1] not in again


def test_a_producer_ends_its_transaction_on_the_new_leader_after_a_failover(cluster):
    leader, follower = tx_replicated(cluster, min_insync=1)
    with Producer(**cluster.client_kwargs(send_timeout=30)) as producer:
        prepared = producer.prepare("orders", b"tx", message_type="paid")
        lose_leader(cluster, leader, follower)
        assert producer.end_transaction(prepared, commit=True) == "committed"  # sent to the new leader
        assert prepared.message_id in delivered_after_marker(cluster, producer)


def test_a_follower_that_was_down_gets_the_prepares_and_their_ends_from_the_leaders_files(cluster):
    leader, follower = tx_replicated(cluster, min_insync=1)
    follower.kill(signal.SIGKILL)
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        done, undone, open_ = (producer.prepare("orders", b"tx %d" % i, message_type="paid") for i in range(3))
        producer.end_transaction(done, commit=True)
        producer.end_transaction(undone, commit=False)
    leader.stop()
    leader.start()  # its memory of recent records is gone: the follower's catch-up is read from its files
    follower.start()
    wait_for(lambda: in_sync(leader) == 2, 30, "the restarted follower in sync again")
    lose_leader(cluster, leader, follower)
    ids = [done.message_id, undone.message_id, open_.message_id]
    # ZooKeeper names the new leader before the broker has taken the partition over; until then it answers
    # "unknown" for all three (it answers only for the partitions it leads)
    wait_for(lambda: states(follower, ids) == {ids[0]: "committed", ids[1]: "rolled_back", ids[2]: "prepared"},
             20, "the new leader's transaction states")
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        delivered = delivered_after_marker(cluster, producer)
    assert ids[0] in delivered and ids[1] not in delivered and ids[2] not in delivered


def test_a_prepare_is_acknowledged_only_once_the_follower_holds_it(cluster):
    leader, follower = tx_replicated(cluster, min_insync=2)
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        producer.prepare("orders", b"first", message_type="paid")
        follower.kill(signal.SIGSTOP)
        try:
            frozen = pool.submit(producer.prepare, "orders", b"while frozen", message_type="paid")
            with pytest.raises(concurrent.futures.TimeoutError):
                frozen.result(timeout=1.0)  # stored by the leader, not by the follower: no acknowledgement
        finally:
            follower.kill(signal.SIGCONT)
        prepared = frozen.result(timeout=20)
    lose_leader(cluster, leader, follower)
    # (ZooKeeper names the new leader a moment before it has opened the partition as its own)
    wait_for(lambda: states(follower, [prepared.message_id]) == {prepared.message_id: "prepared"}, 20,
             "the new leader holding the prepared message")
