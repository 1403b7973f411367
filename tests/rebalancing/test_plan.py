"""The rebalance plan as a pure function: what moves when a broker is added or removed, and that it moves no more
than the balance needs (docs/rebalance.md)."""

from __future__ import annotations

import pytest

from apps.rebalancing.plan import CannotPlan, Step, loads, plan, with_target, without_source


def apply(placements, steps):
    out = {t: {p: list(r) for p, r in parts.items()} for t, parts in placements.items()}
    for s in steps:
        reps = out[s.topic][s.partition]
        assert s.source in reps and s.target not in reps, f"{s} does not fit {reps}"
        reps[reps.index(s.source)] = s.target
    return out


THREE = {"orders": {0: ["b1", "b2"], 1: ["b2", "b3"], 2: ["b3", "b1"], 3: ["b1", "b2"]}}  # 8 replicas: 3, 3, 2


def test_an_added_broker_receives_a_fair_share_by_moving_followers_while_leaders_are_even():
    even = {"orders": {0: ["b1", "b2"], 1: ["b2", "b3"], 2: ["b3", "b1"]}}  # 2 replicas and 1 leader each
    steps = plan(even, ["b1", "b2", "b3", "b4"])
    assert len(steps) == 1 and steps[0].target == "b4" and not steps[0].leader
    replicas, leaders = loads(apply(even, steps))
    assert sorted(replicas.values()) == [1, 1, 2, 2] and replicas["b4"] == 1
    assert leaders == {**loads(even)[1], "b4": 0}, "no leader moved"


def test_an_added_broker_also_takes_a_leader_from_a_broker_leading_two_more():
    steps = plan(THREE, ["b1", "b2", "b3", "b4"])
    replicas, leaders = loads(apply(THREE, steps))
    assert replicas == {"b1": 2, "b2": 2, "b3": 2, "b4": 2}
    assert len(steps) == 2, "two replicas reach b4: exactly what it lacks"
    assert all(s.target == "b4" for s in steps)
    assert leaders == {"b1": 1, "b2": 1, "b3": 1, "b4": 1}, "b1 led two, b4 none: one leadership moved"


def test_a_removed_broker_is_emptied_onto_the_rest_keeping_each_partition_on_distinct_brokers():
    steps = plan(THREE, ["b1", "b2", "b3"], remove=["b1"])
    after = apply(THREE, steps)
    assert "b1" not in loads(after)[0]
    assert {s.source for s in steps} == {"b1"} and len(steps) == 3
    assert all(len(set(r)) == len(r) == 2 for r in after["orders"].values())
    assert loads(after)[0] == {"b2": 4, "b3": 4}
    # b1 led partitions 0 and 3: their leadership passes to the broker that takes b1's place
    assert {(s.partition, s.leader) for s in steps} == {(0, True), (2, False), (3, True)}


def test_a_broker_no_longer_registered_counts_as_removed():
    assert plan(THREE, ["b2", "b3", "b4"]) == plan(THREE, ["b2", "b3", "b4", "b1"], remove=["b1"])


def test_a_balanced_cluster_needs_no_step_and_the_plan_is_deterministic():
    balanced = {"a": {0: ["b1"], 1: ["b2"]}, "b": {0: ["b2", "b1"], 1: ["b1", "b2"]}}
    assert plan(balanced, ["b1", "b2"]) == []
    assert plan(THREE, ["b4", "b3", "b2", "b1"]) == plan(THREE, ["b1", "b2", "b3", "b4"])


def test_single_replica_partitions_move_their_leader_and_leaders_spread():
    one = {"t": {p: ["b1"] for p in range(4)}}
    steps = plan(one, ["b1", "b2"])
    assert [(s.partition, s.target, s.leader) for s in steps] == [(0, "b2", True), (1, "b2", True)]


def test_too_few_brokers_for_the_replicas_cannot_be_planned():
    with pytest.raises(CannotPlan, match="partition 0 has 2 replicas"):
        plan({"t": {0: ["b1", "b2"]}}, ["b1", "b2"], remove=["b2"])


def test_a_steps_phases_add_the_target_last_then_put_it_in_the_sources_place():
    step = Step("t", 0, "b1", "b4", True)
    assert with_target(["b1", "b2"], step) == ["b1", "b2", "b4"]
    assert with_target(["b1", "b2", "b4"], step) == ["b1", "b2", "b4"], "run twice, added once"
    assert without_source(["b1", "b2", "b4"], step) == ["b4", "b2"], "the target leads in the source's place"
    assert without_source(["b4", "b2"], step) == ["b4", "b2"], "run twice, changes nothing"
    assert Step.from_dict(step.as_dict()) == step


def test_on_a_larger_cluster_each_replica_moves_at_most_once_and_the_counts_end_within_one():
    nodes = [f"b{i}" for i in range(9)]
    big = {f"t{t}": {p: [nodes[(t * 16 + p + r) % 9] for r in range(3)] for p in range(16)} for t in range(20)}
    held = loads(big)[0]
    removing = plan(big, nodes, remove=["b0"])
    assert len(removing) == held["b0"], "only b0's replicas move"
    counts = loads(apply(big, removing))[0]
    assert "b0" not in counts and max(counts.values()) - min(counts.values()) <= 1
    adding = plan(big, [*nodes, "b9"])
    assert {s.target for s in adding} == {"b9"} and len(adding) == 960 // 10
    counts = loads(apply(big, adding))[0]
    assert set(counts.values()) == {96}
