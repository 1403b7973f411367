"""A partition leader answers what waits on replicas once the cluster's `min_insync` is lowered (/meta changed), as it
does once the ISR shrinks: a publish, a transaction's end and delayed messages admitted with two replicas in sync,
whose follower then left, are answered when one replica is enough, not failed at the acknowledgement timeout."""

from __future__ import annotations

from broker_core.cluster.state import ClusterState
from broker_core.replication.leader import PartitionLeader, _Follower
from broker_core.replication.schedule_sync import ScheduleLeading
from broker_core.replication.service import Replication


class _Conn:
    """A follower's connection as the leader sees it (what it sends is dropped here)."""

    client_id = "n2"

    def send(self, frame) -> None:
        pass


def _replication(min_insync: int) -> tuple[Replication, PartitionLeader, _Conn]:
    """Partition 0 of `orders` led by n1 with n2 in sync, in a cluster of `min_insync`."""
    state = ClusterState()
    state.set_meta({"min_insync": min_insync})
    replication = Replication(state, lambda: "n1")
    leader = PartitionLeader("orders", 0, store=None, min_insync=replication.min_insync, node_id="n1",
                             isr={"n1", "n2"}, write_isr=lambda isr: None)
    leader.schedule = ScheduleLeading(leader, topic=None)
    conn = _Conn()
    leader.followers[id(conn)] = _Follower(conn, acked=0, caught_up_at=0)
    replication.leaders[("orders", 0)] = leader
    return replication, leader, conn


def _wait_on(leader: PartitionLeader) -> list:
    """A publish, a transaction's end and delayed messages, admitted and stored here, waiting on the follower."""
    answers: list = []
    leader.wrap(lambda exc, first, count: answers.append(("publish", exc, count)))(None, 10, 2)
    leader.tx_end(11, "m-1", True, ("g",), 0, "", lambda exc: answers.append(("tx end", exc, None)))(None)
    leader.schedule.scheduled("shop", 0, [], lambda exc, first, count: answers.append(("delayed", exc, count)))(
        None, 0, 3)
    return answers


def test_lowering_min_insync_answers_what_waited_for_a_second_replica():
    replication, leader, conn = _replication(min_insync=2)
    answers = _wait_on(leader)
    leader.gone(conn)  # the follower leaves: the ISR without it is written
    leader.isr_written({"n1"})
    assert answers == []  # one replica holds them, two are needed
    replication.meta_changed({"min_insync": 2, "default_partitions": 3})  # another change: still two needed
    assert answers == []

    replication.meta_changed({"min_insync": 1})

    assert sorted(answers, key=str) == sorted([("publish", None, 2), ("tx end", None, None), ("delayed", None, 3)],
                                              key=str)
