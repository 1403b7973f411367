"""Issue 20: a new batch reaches a follower as the leader's log record (`ReplicaLog`), appended as it came. The
leader still acknowledges a publish only once the follower stored it: a frozen follower means no acknowledgement,
and what is acknowledged is in the follower's files. A record that is torn, corrupt or of another kind is never
appended. A new partition's replicas leave it to its preferred (first) replica while it is starting."""

from __future__ import annotations

import concurrent.futures
import os
import signal

import pytest

from broker_core.client import Producer
from broker_core.storage.store import KIND_BATCH, KIND_FINISH, batch_record_seq, encode_record
from tests.broker.conftest import wait_for
from tests.broker.test_failover import SECRET_VAR, state
from tests.broker.test_replication import follower_next_seq, held_ids, in_sync, replicated


def test_only_a_whole_intact_batch_record_is_taken():
    record = encode_record(KIND_BATCH, [41, "app", 5, [["m1", "x", None, None, {}, b"b", 0, 0, 0, 0]], [["g"]]])
    assert batch_record_seq(record) == 41
    flipped = record[:-2] + bytes([record[-2] ^ 1]) + record[-1:]
    for bad in (record[:-1], flipped, record + b"\x00", b"", encode_record(KIND_FINISH, [41, "g", [1]])):
        assert batch_record_seq(bad) is None


def test_a_publish_is_acknowledged_only_once_the_follower_stored_the_leaders_record(cluster):
    leader, follower = replicated(cluster, min_insync=2)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        first = producer.send_many("orders", [b"a%d" % i for i in range(300)])
        following = follower.stats()["topics"]["orders"]["replication"]["following"]["0"]
        assert following["records"] >= 1, "new batches came as the leader's records"
        follower.kill(signal.SIGSTOP)
        try:
            frozen = producer.send_async("orders", b"while frozen")
            with pytest.raises(concurrent.futures.TimeoutError):
                frozen.result(timeout=1.0)  # the leader stored it; the follower did not: no acknowledgement
        finally:
            follower.kill(signal.SIGCONT)
        later = frozen.result(timeout=20)
    assert follower_next_seq(follower) == 302
    assert set(first) | {later} <= held_ids(follower.data_dir), "every acknowledged message in the follower's files"


def test_new_partitions_are_left_to_their_preferred_replicas_while_brokers_start(cluster):
    secret = cluster.state / "cluster-secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    cluster.standard("orders")
    cluster.pv.topic("orders", partitions=2, replication_factor=2)
    early, late = (cluster.broker(start=False, env={SECRET_VAR: str(secret)}) for _ in range(2))
    doc = cluster.pv.placement("orders", 2, 2, [early.node_id, late.node_id])
    preferred = {part["id"]: part["replicas"][0] for part in doc["partitions"]}
    assert set(preferred.values()) == {early.node_id, late.node_id}, "the placement spreads the leaders"
    early.start()
    wait_for(lambda: state(cluster, 0)["leader_epoch"] >= 1, 20, "the first broker to lead its own partition")
    late.start()  # (before this change the first broker had taken the other partition too)
    wait_for(lambda: state(cluster, 1)["leader_epoch"] >= 1, 20, "the other partition elected")
    assert {pid: state(cluster, pid)["leader"] for pid in preferred} == preferred
