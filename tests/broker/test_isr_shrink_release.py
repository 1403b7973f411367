"""A partition leader answers what waits on replicas once it no longer needs to: a publish, a transaction's end and
delayed messages alike (issues 17, 20), not failed at the acknowledgement timeout.
- The ISR shrank: the follower's connection drops at once, but the ISR in ZooKeeper changes only when the leader's
  write of it returns; what arrived in between waits for the ISR as written, and is answered when the write returns.
- The cluster's `min_insync` was lowered (/meta changed): what was admitted with two replicas in sync, whose follower
  then left, is answered when one replica is enough."""

from __future__ import annotations

from broker_core.cluster.state import ClusterState
from broker_core.replication.leader import PartitionLeader, _Follower
from broker_core.replication.schedule_sync import ScheduleLeading
from broker_core.replication.service import Replication

EVERY_KIND = sorted([("publish", None, 2), ("tx end", None, None), ("delayed", None, 3)], key=str)


class _Conn:
    """A follower's connection as the leader sees it (what it sends is dropped here)."""

    client_id = "n2"

    def send(self, frame) -> None:
        pass


def _leader(min_insync=lambda: 1) -> PartitionLeader:
    """Partition 0 of `orders` led by n1, with n2 in the ISR as written."""
    leader = PartitionLeader("orders", 0, store=None, min_insync=min_insync, node_id="n1", isr={"n1", "n2"},
                             write_isr=lambda isr: None)
    leader.schedule = ScheduleLeading(leader, topic=None)
    return leader


def _wait_on(leader: PartitionLeader) -> list:
    """A publish, a transaction's end and delayed messages, admitted and stored here, waiting on n2; their answers."""
    answers: list = []
    leader.wrap(lambda exc, first, count: answers.append(("publish", exc, count)))(None, 10, 2)
    leader.tx_end(11, "m-1", True, ("g",), 0, "", lambda exc: answers.append(("tx end", exc, None)))(None)
    leader.schedule.scheduled("shop", 0, [], lambda exc, first, count: answers.append(("delayed", exc, count)))(
        None, 0, 3)
    return answers


def test_what_waited_on_a_follower_that_left_is_answered_once_the_isr_without_it_is_written():
    leader = _leader()  # (n2's connection already gone, min_insync 1)
    answers = _wait_on(leader)
    assert answers == []  # n2 is in the ISR as written: each waits for it

    leader.isr_written({"n1"})  # the write that drops n2 returns

    assert sorted(answers, key=str) == EVERY_KIND


def test_while_the_follower_is_in_the_isr_nothing_waiting_on_it_is_answered():
    leader = _leader()
    answers = _wait_on(leader)
    leader.isr_written({"n1", "n2"})  # an unrelated write: n2 still in
    assert answers == []


def test_lowering_min_insync_answers_what_waited_for_a_second_replica():
    state = ClusterState()
    state.set_meta({"min_insync": 2})
    replication = Replication(state, lambda: "n1")
    leader = replication.leaders[("orders", 0)] = _leader(replication.min_insync)
    conn = _Conn()
    leader.followers[id(conn)] = _Follower(conn, acked=0, caught_up_at=0)  # n2 in sync: two replicas, admitted
    answers = _wait_on(leader)
    leader.gone(conn)  # the follower leaves: the ISR without it is written
    leader.isr_written({"n1"})
    assert answers == []  # one replica holds them, two are needed
    replication.meta_changed({"min_insync": 2, "default_partitions": 3})  # another change: still two needed
    assert answers == []

    replication.meta_changed({"min_insync": 1})

    assert sorted(answers, key=str) == EVERY_KIND
