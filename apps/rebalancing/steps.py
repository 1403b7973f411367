"""The three phases of a rebalance step (docs/rebalance.md). Each looks at what is true now in ZooKeeper and on
the brokers, makes the one change it is for if it has not been made, and answers Done or Wait with what it read;
run twice (a worker killed mid-way) it changes nothing twice.

- add: the target joins the partition's replicas, last (a follower: the leader stays), epoch bumped;
- catch_up: wait until the partition's leader (registered; the one `/partition-state` names once leaders are
  elected, else the first replica) counts the target in sync (its `/stats`);
- drop: the target takes the source's place (the first place, if the source led) and the source leaves.

So the partition always keeps its leader and every replica it had until the new one holds what they hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.rebalancing import zk
from apps.rebalancing.choices import Phase
from apps.rebalancing.plan import Step, with_target, without_source


@dataclass
class Wait:
    summary: str
    progress: dict = field(default_factory=dict)


@dataclass
class Done:
    summary: str
    progress: dict = field(default_factory=dict)


class StepRefused(Exception):
    """The step cannot be done as planned (its topic or partition is gone): the rebalance fails visibly."""


def _partition(session, step: Step) -> tuple[zk.TopicPlacement, list[str]]:
    current = zk.placement(session, step.topic)
    if current is None or step.partition not in current.replicas:
        raise StepRefused(f"{step}: the topic's placement has no partition {step.partition} any more")
    return current, current.replicas[step.partition]


def _done_already(step: Step, replicas: list[str]) -> bool:
    return step.source not in replicas and step.target in replicas


def add(cluster, step: Step) -> Wait | Done:
    session = zk.session(cluster)
    current, replicas = _partition(session, step)
    if step.target in replicas:
        return Done(f"{step.target} holds a replica of {step.topic} partition {step.partition}",
                    {"replicas": replicas, "epoch": current.epoch})
    if step.source not in replicas:
        raise StepRefused(f"{step}: {step.source} no longer holds the partition (its placement changed since the "
                          f"plan): abandon this rebalance and plan a new one")
    if step.target not in zk.registered(session):
        return Wait(f"{step}: waiting for broker {step.target} to be registered", {"replicas": replicas})
    wanted = with_target(replicas, step)
    try:
        epoch = zk.write_replicas(session, current, step.partition, wanted)
    except zk.PlacementChanged as exc:
        return Wait(str(exc), {"replicas": replicas})
    return Done(f"{step.target} added to {step.topic} partition {step.partition} (epoch {epoch})",
                {"replicas": wanted, "epoch": epoch})


def catch_up(cluster, step: Step) -> Wait | Done:
    session = zk.session(cluster)
    current, replicas = _partition(session, step)
    if _done_already(step, replicas):
        return Done(f"{step.target} already replaced {step.source}", {"replicas": replicas})
    if step.target not in replicas:
        raise StepRefused(f"{step}: {step.target} left the partition's replicas while it caught up")
    live = zk.registered(session)
    leader = zk.leader_of(session, step.topic, step.partition) or replicas[0]
    base = {"replicas": replicas, "leader": leader, "epoch": current.epoch}
    if leader not in live:
        return Wait(f"{step}: leader {leader} is not registered; waiting for it (or an elected leader)", base)
    if step.target not in live:
        return Wait(f"{step}: broker {step.target} is not registered", base)
    seen = zk.follower_state(live[leader], step.topic, step.partition, step.target)
    figures = {**base, "connected": seen.connected, "in_sync": seen.in_sync, "acked": seen.acked}
    if not seen.answered:
        return Wait(f"{step}: leader {leader} did not answer ({seen.error})", figures)
    if not seen.in_sync:
        state = f"holds up to seq {seen.acked}" if seen.connected else "has not connected yet"
        return Wait(f"{step}: {step.target} catching up ({state})", figures)
    return Done(f"{step.target} is in sync with leader {leader} (seq {seen.acked})", figures)


def drop(cluster, step: Step) -> Wait | Done:
    session = zk.session(cluster)
    current, replicas = _partition(session, step)
    if _done_already(step, replicas):
        return Done(f"{step} done", {"replicas": replicas, "epoch": current.epoch})
    if step.target not in replicas:  # never drop the source for a target that is not there and in sync
        raise StepRefused(f"{step}: {step.target} left the partition's replicas before the source was dropped; "
                          f"resume runs the step again from its start")
    wanted = without_source(replicas, step)
    try:
        epoch = zk.write_replicas(session, current, step.partition, wanted)
    except zk.PlacementChanged as exc:
        return Wait(str(exc), {"replicas": replicas})
    return Done(f"{step} done (epoch {epoch})", {"replicas": wanted, "epoch": epoch})


PHASE_RUN = {Phase.ADD: add, Phase.CATCH_UP: catch_up, Phase.DROP: drop}
