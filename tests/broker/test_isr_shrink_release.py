"""A partition leader answers what waited on a follower once that follower leaves the in-sync replicas: a publish,
a transaction's end and delayed messages alike (issues 17, 20). The follower's connection drops at once, but the
ISR in ZooKeeper changes only when the leader's write of it returns; what arrived in between waits for the
ISR as written, and must be answered when the write returns, not fail at the acknowledgement timeout."""

from __future__ import annotations

from broker_core.replication.leader import PartitionLeader
from broker_core.replication.schedule_sync import ScheduleLeading


def _leader() -> tuple[PartitionLeader, list]:
    """Partition 0 led by n1, with n2 still in the ISR as written (its connection already gone), min_insync 1."""
    writes: list = []
    leader = PartitionLeader("orders", 0, store=None, min_insync=lambda: 1, node_id="n1", isr={"n1", "n2"},
                             write_isr=writes.append)
    leader.schedule = ScheduleLeading(leader, topic=None)
    return leader, writes


def test_what_waited_on_a_follower_that_left_is_answered_once_the_isr_without_it_is_written():
    leader, writes = _leader()
    answers: list = []
    leader.wrap(lambda exc, first, count: answers.append(("publish", exc, count)))(None, 10, 2)
    leader.tx_end(11, "m-1", True, ("g",), 0, "", lambda exc: answers.append(("tx end", exc, None)))(None)
    leader.schedule.scheduled("shop", 0, [], lambda exc, first, count: answers.append(("delayed", exc, count)))(
        None, 0, 3)
    assert answers == []  # n2 is in the ISR as written: each waits for it

    leader.isr_written({"n1"})  # the write that drops n2 returns

    assert sorted(answers, key=str) == sorted([("publish", None, 2), ("tx end", None, None), ("delayed", None, 3)],
                                              key=str)


def test_while_the_follower_is_in_the_isr_nothing_waiting_on_it_is_answered():
    leader, _ = _leader()
    answers: list = []
    leader.tx_end(11, "m-1", True, ("g",), 0, "", lambda exc: answers.append(exc))(None)
    leader.schedule.scheduled("shop", 0, [], lambda exc, first, count: answers.append(exc))(None, 0, 3)
    leader.isr_written({"n1", "n2"})  # an unrelated write: n2 still in
    assert answers == []
