"""Issue 20: delayed messages on a replicated topic. The replicas of partition 0 keep the topic's schedule: a
delayed publish is acknowledged once `min_insync` replicas (and the ISR) hold it, a follower that was away gets
the schedule as it stands before it counts as in sync, and when the leader's disk is lost its successor
delivers every acknowledged delayed message, none before its due time, and not again what was delivered before.
Real brokers over TCP and a real ZooKeeper (`ReplicaSchedule` / `ReplicaScheduled`)."""

from __future__ import annotations

import concurrent.futures
import signal
import socket
import time

import pytest

from broker_core import protocol as p
from broker_core.client import Consumer, Message, Producer
from tests.broker.conftest import wait_for
from tests.broker.test_delay import DueRecorder
from tests.broker.test_failover import state
from tests.broker.test_replication import in_sync, replicated
from tests.broker.test_security import hello_frame, read_until_closed


def delayed(broker) -> dict:
    return broker.stats()["topics"]["orders"]["delayed"]


def scheduled(broker) -> int:
    """The messages the broker's schedule holds (a follower's copy too)."""
    return delayed(broker)["scheduled"]


def following(broker) -> dict:
    """The broker's copy of partition 0 as a follower (`finished`: the (message, group) pairs its leader's groups
    finished and it finished too)."""
    return broker.stats()["topics"]["orders"]["replication"]["following"]["0"]


def send_delayed(producer, delays: list[float], tag: str) -> dict[str, tuple[int, int]]:
    """Send one delayed message per delay (seconds); returns id -> the earliest and latest due time the SDK can
    have set for it (Unix ms: the delay counts from the moment it is sent)."""
    before = time.time()
    messages = [Message(b"%s %d" % (tag.encode(), i), delay=d) for i, d in enumerate(delays)]
    ids = producer.send_many("orders", messages)
    after = time.time()
    return {i: (int((before + d) * 1000), int((after + d) * 1000) + 1) for i, d in zip(ids, delays, strict=True)}


def lose_leader(cluster, leader, follower) -> None:
    leader.lose_disk()
    wait_for(lambda: state(cluster, 0)["leader"] == follower.node_id, 30, "the follower elected")


def consume_all(cluster, asked: dict[str, int], timeout: float = 60) -> DueRecorder:
    got = DueRecorder()
    with Consumer("orders", "billing", got, **cluster.client_kwargs()):
        wait_for(lambda: set(asked) <= set(got.got), timeout, "every acknowledged delayed message")
    return got


def assert_none_early(got: DueRecorder, asked: dict[str, tuple[int, int]]) -> None:
    wrong = [(i, got.got[i][1], due) for i, due in asked.items() if not due[0] <= got.got[i][1] <= due[1]]
    assert not wrong, f"{len(wrong)} carry another due time than the one asked, e.g. {wrong[:3]}"
    early = [(i, got.got[i][0], got.got[i][1]) for i in asked if got.got[i][0] < got.got[i][1]]
    assert not early, f"{len(early)} delivered before their due time, e.g. {early[:3]}"


def test_acknowledged_delayed_messages_survive_the_loss_of_the_leaders_disk(cluster):
    leader, follower = replicated(cluster, min_insync=1)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        asked = send_delayed(producer, [4 + (i % 40) / 10 for i in range(400)], "later")
        # the follower's copy holds each one: it is in the ISR, so every acknowledgement waited for it
        assert scheduled(follower) == 400
        assert delayed(follower)["passive"] and not delayed(leader)["passive"]
        # the topic's figure (summed over brokers by the control plane and Prometheus) counts the leader's only
        assert [b.stats()["topics"]["orders"]["scheduled"] for b in (leader, follower)] == [400, 0]
        lose_leader(cluster, leader, follower)
    wait_for(lambda: not delayed(follower)["passive"], 20, "the new leader's schedule active")
    got = consume_all(cluster, asked)
    assert_none_early(got, asked)
    assert got.repeats == 0 and delayed(follower)["delivered"] == 400


def test_what_was_delivered_before_a_failover_is_not_delivered_again(cluster):
    leader, follower = replicated(cluster, min_insync=1)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        asked = send_delayed(producer, [1 + (i % 10) / 10 for i in range(200)], "soon")
        got = consume_all(cluster, asked)
        assert_none_early(got, asked)
        # the leader settled them: the follower's copy drops them (it would publish them again if promoted)
        wait_for(lambda: scheduled(follower) == 0, 10, "the follower's copy empty")
        # and the acks: the leader sends what its group finished to the follower each tick (`ReplicaAcks`); what was
        # finished in the last tick before a kill may be delivered again (broker_core/README.md, replication)
        wait_for(lambda: following(follower)["finished"] >= len(asked), 10, "the follower finished all 200 too")
        lose_leader(cluster, leader, follower)
        later = send_delayed(producer, [2.0] * 10, "after")  # the new leader schedules too
    got = consume_all(cluster, later)
    assert_none_early(got, later)
    assert delayed(follower)["delivered"] == 10, "none of the 200 published again from the schedule"
    assert not set(asked) & set(got.got), "none of the 200 delivered again"


def test_a_follower_that_was_down_gets_the_schedule_before_it_is_in_sync_and_can_take_over(cluster):
    leader, follower = replicated(cluster, min_insync=1)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    follower.kill(signal.SIGKILL)
    wait_for(lambda: in_sync(leader) == 1, 20, "the follower out of sync")
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        soon = send_delayed(producer, [0.5] * 50, "soon")  # delivered while the follower is down
        later = send_delayed(producer, [12 + i / 100 for i in range(300)], "later")
    wait_for(lambda: delayed(leader)["delivered"] == 50, 20, "the leader delivered the first 50")
    follower.start()
    wait_for(lambda: in_sync(leader) == 2, 30, "the restarted follower in sync again")
    # its copy was emptied and sent anew: it holds what is still scheduled, not what was delivered meanwhile
    assert scheduled(follower) == 300
    schedule = following(follower)["schedule"]
    assert schedule["resets"] >= 1 and schedule["replicated"] >= 300
    lose_leader(cluster, leader, follower)
    asked = {**soon, **later}
    got = consume_all(cluster, asked)  # the 50 from partition 0's log, the 300 from the new leader's schedule
    assert_none_early(got, asked)
    assert delayed(follower)["delivered"] == 300


def test_a_delayed_publish_is_acknowledged_only_once_the_follower_holds_it(cluster):
    leader, follower = replicated(cluster, min_insync=2)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        follower.kill(signal.SIGSTOP)
        try:
            frozen = pool.submit(producer.send, "orders", b"while frozen", delay=6)
            with pytest.raises(concurrent.futures.TimeoutError):
                frozen.result(timeout=1.0)  # stored by the leader, not by the follower: no acknowledgement
            assert scheduled(leader) == 1
        finally:
            follower.kill(signal.SIGCONT)
        message_id = frozen.result(timeout=20)
        asked = {message_id: (0, 0)}
        assert scheduled(follower) == 1
    lose_leader(cluster, leader, follower)
    cluster.pv.meta(min_insync=1)  # (alone now, the new leader could store nothing with min_insync 2)
    got = consume_all(cluster, asked)
    assert got.repeats == 0


def test_delayed_messages_sent_to_another_partition_are_refused_with_where_they_go(cluster):
    """The SDK sends a replicated topic's delayed messages to partition 0's leader (its replicas keep the
    schedule); a client that sends them to another partition's leader is told so, and nothing is stored."""
    leader, follower = replicated(cluster, min_insync=1)
    cluster.pv.topic("orders", partitions=2, replication_factor=2)
    cluster.pv.placement("orders", 2, 2, [leader.node_id, follower.node_id])
    wait_for(lambda: state(cluster, 1)["leader_epoch"] >= 1 and in_sync(leader) == 2, 30, "partition 1 elected")
    other = next(b for b in (leader, follower) if b.node_id == state(cluster, 1)["leader"])
    now_ms = int(time.time() * 1000)
    message = [*p.message("m-delayed", "default", b"later")[:9], now_ms, now_ms + 30_000]
    with socket.create_connection(("127.0.0.1", other.port), timeout=5) as sock:
        sock.sendall(hello_frame() + p.encode_frame(p.Publish(1, "orders", [message], 1)))
        events, _ = read_until_closed(sock, timeout=3)
    errors = [e for e in events if type(e) is p.Error]
    assert errors and errors[0].code_name == p.E_INVALID and "partition 0" in errors[0].message, events
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:  # the SDK sends them to partition 0
        producer.send_many("orders", [Message(b"later %d" % i, delay=30) for i in range(20)])
    assert scheduled(leader) == 20 and scheduled(follower) == 20


def test_delayed_messages_sent_throughout_a_follower_restart_and_a_failover_are_all_delivered_none_early(cluster):
    """The guarantee under way: a producer sends delayed messages (due 0.5-4 s later) all along; the follower is
    restarted mid-stream (its copy emptied and sent anew while new ones are scheduled and earlier ones come due),
    then, once it is in sync again, the leader loses its disk. Every acknowledged message is delivered (0 lost),
    none before its due time; duplicates are counted (at most what came due after the last "through" mark)."""
    leader, follower = replicated(cluster, min_insync=1)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    asked: dict[str, tuple[int, int]] = {}
    failed = []
    got = DueRecorder()
    with Producer(**cluster.client_kwargs(send_timeout=30)) as producer, \
            Consumer("orders", "billing", got, **cluster.client_kwargs()):

        def send_for(seconds: float) -> None:
            end = time.monotonic() + seconds
            i = 0
            while time.monotonic() < end:
                try:
                    asked.update(send_delayed(producer, [0.5 + (i + k) % 35 / 10 for k in range(20)], f"r{i}"))
                except Exception as exc:  # (not acknowledged: not counted as owed)
                    failed.append(exc)
                i += 20
                time.sleep(0.02)

        send_for(2)
        follower.kill(signal.SIGKILL)
        send_for(2)
        follower.start()
        send_for(1)
        wait_for(lambda: in_sync(leader) == 2, 30, "the restarted follower in sync again")
        send_for(1)
        leader.lose_disk()
        wait_for(lambda: state(cluster, 0)["leader"] == follower.node_id, 30, "the follower elected")
        send_for(1)
        wait_for(lambda: set(asked) <= set(got.got), 60, "every acknowledged delayed message")
    assert len(asked) > 1000 and len(failed) < 5
    assert_none_early(got, asked)
    print(f"\n{len(asked)} acknowledged, {len(failed)} sends failed, {got.repeats} delivered twice")
