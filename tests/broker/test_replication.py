"""Issue 20, item 2: a partition of replication factor 2 on real broker processes. The leader acknowledges a
publish only once min_insync replicas hold it; with too few in sync it refuses and stores nothing; a follower
restarted after missing writes catches up from the leader's log (read back from its segment files after the
leader restarted too); and the follower holds every acknowledged message when the leader's disk is lost."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal

import pytest

from broker_core import protocol as p
from broker_core.client import BrokerError, Producer
from broker_core.layout import LAYOUT
from broker_core.storage.file_store import FileStore
from tests.broker.conftest import APP, wait_for

SECRET_VAR = "SWITCHYARD_BROKER_CLUSTER_SECRET_FILE"


def replicated(cluster, min_insync: int, admin_token: str | None = None, options: tuple[str, ...] = (),
               **topic_fields):
    """Two brokers holding `orders` (1 partition, replication factor 2, `topic_fields` added), b0 leading; both
    started with the command-line `options`."""
    secret = cluster.state / "cluster-secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    cluster.standard("orders")
    cluster.pv.meta(min_insync=min_insync)
    cluster.pv.topic("orders", partitions=1, replication_factor=2, **topic_fields)
    cluster.pv.binding("orders", "billing", APP)
    leader, follower = (cluster.broker(*options, admin_token=admin_token, env={SECRET_VAR: str(secret)})
                        for _ in range(2))
    cluster.pv.placement("orders", 1, 2, [leader.node_id, follower.node_id])
    doc = cluster.zk_client.get(cluster.chroot + LAYOUT.placement("orders"))[0]
    assert doc.index(leader.node_id.encode()) < doc.index(follower.node_id.encode()), "b0 leads"
    return leader, follower


def in_sync(leader) -> int:
    """Replicas in sync as the leader sees them (0: it does not lead the partition yet)."""
    leading = leader.stats()["topics"].get("orders", {}).get("replication", {}).get("leading", {})
    return leading["0"]["in_sync"] if "0" in leading else 0


def acked(leader, follower) -> int:
    """The last seq the follower told the leader it holds durably."""
    followers = leader.stats()["topics"]["orders"]["replication"]["leading"]["0"]["followers"]
    return followers.get(follower.node_id, {}).get("acked", 0)


def follower_next_seq(follower) -> int:
    return follower.stats()["topics"]["orders"]["replication"]["following"]["0"]["next_seq"]


def held_ids(data_dir) -> set[str]:
    """The message ids a broker's partition 0 folder holds, read by the file store's own recovery."""
    copy = data_dir.parent / f"{data_dir.name}-copy"
    shutil.copytree(data_dir / "topics" / "orders" / "p0", copy)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        store = FileStore(copy, executor=pool, notify=lambda fn, *a: fn(*a))
        ids = {m.id for m, _ in store.recover()}
        store.close()
    return ids


def test_min_insync_acknowledges_only_what_both_replicas_hold_and_refuses_without_them(cluster):
    leader, follower = replicated(cluster, min_insync=2)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        acknowledged = producer.send_many("orders", [b"m%d" % i for i in range(1000)])
        assert follower_next_seq(follower) >= 1001, "acknowledged only once the follower held it"

        follower.kill(signal.SIGKILL)
        wait_for(lambda: in_sync(leader) == 1, 10, "the leader to see its follower gone")
        before = leader.stats()["topics"]["orders"]["published"]
        with pytest.raises(BrokerError) as refused:
            producer.send("orders", b"refused")
        assert refused.value.code == p.E_NOT_ENOUGH_REPLICAS and "min_insync 2" in str(refused.value)
        assert leader.stats()["topics"]["orders"]["published"] == before, "nothing stored"
    assert set(acknowledged) <= held_ids(follower.data_dir)


def test_lowering_min_insync_answers_a_publish_that_waited_for_a_frozen_follower(cluster):
    """min_insync 2 and the follower frozen (SIGSTOP): a publish waits; once the leader has put the follower out
    of the ISR it still waits (one replica holds it, two are needed). Lowering the cluster's min_insync to 1 in
    ZooKeeper answers it, and the next publish is acknowledged by the leader alone. Thawed, the follower catches
    up with both. (A follower lagging 0.5 s leaves the ISR: the leader answers a publish within 5 s or refuses it,
    so the lowering comes well within that.)"""
    leader, follower = replicated(cluster, min_insync=2, options=("--replica-lag-timeout-ms", "500"))
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        follower.kill(signal.SIGSTOP)
        try:
            waiting = pool.submit(producer.send, "orders", b"waited")
            wait_for(lambda: in_sync(leader) == 1, 20, "the leader to put the frozen follower out of the ISR")
            assert leader.stats()["topics"]["orders"]["published"] == 1  # stored by the leader
            assert not waiting.done(), "answered with one replica while min_insync is 2"

            cluster.pv.meta(min_insync=1)

            message_id = waiting.result(timeout=20)
            alone = producer.send("orders", b"alone")
            assert in_sync(leader) == 1
        finally:
            follower.kill(signal.SIGCONT)
    assert message_id != alone
    assert leader.stats()["topics"]["orders"]["published"] == 2
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower back in sync")
    assert follower_next_seq(follower) >= 3, "the follower holds both"


def test_a_follower_restarted_after_missing_writes_catches_up_from_the_leaders_log(cluster):
    leader, follower = replicated(cluster, min_insync=1)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        first = producer.send_many("orders", [b"a%d" % i for i in range(500)])
        wait_for(lambda: acked(leader, follower) == 500, 10, "the follower to hold the first 500 durably")
        follower.kill(signal.SIGKILL)
        missed = producer.send_many("orders", [b"b%d" % i for i in range(700)])  # min_insync 1: the leader alone
    leader.stop()
    leader.start()  # its memory of recent batches is gone: the follower's catch-up is read from the segment files
    follower.start()
    wait_for(lambda: in_sync(leader) == 2, 20, "the restarted follower in sync again")
    assert follower_next_seq(follower) == 1201
    assert "fetches from seq 501" in leader.log(), "the follower asked for what it missed, and got it"
    # the leader's disk is lost: the follower holds every acknowledged message
    leader.lose_disk()
    assert set(first) | set(missed) <= held_ids(follower.data_dir)
