"""The plan of a rebalance (docs/rebalance.md): from the cluster's placements and its brokers, the replica moves
that leave every broker with a fair share. Pure: no I/O, no Django.

A step moves one replica of one partition from `source` to `target`; the target takes the source's place in the
partition's replica list (so a moved leader's place, the first, passes to the target). The plan:

1. moves every replica off the brokers being removed (or no longer registered), each to the broker holding
   the fewest replicas (then, for a leader, the fewest leaders) that does not hold the partition yet;
2. then, while a broker holds two replicas more than another, moves one from the most loaded broker to the
   least loaded one — a follower rather than a leader (leaders stay put: moving one changes where clients
   publish), unless the donor also leads two partitions more than the receiver.

Each move strictly lowers the spread of replica counts, so the plan ends, and it makes no move the balance does
not need (minimal). Ties are broken by topic, partition and node id (a broker's partitions are looked at in key
order, then in the order they reached it): the same input gives the same plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

Placements = Mapping[str, Mapping[int, Sequence[str]]]  # topic -> partition -> replicas (the first leads)


class CannotPlan(ValueError):
    """No plan fits: too few brokers for a partition's replicas."""


@dataclass(frozen=True)
class Step:
    topic: str
    partition: int
    source: str
    target: str
    leader: bool  # the moved replica leads the partition: the target leads it once the step is done

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping) -> Step:
        return cls(str(doc["topic"]), int(doc["partition"]), str(doc["source"]), str(doc["target"]),
                   bool(doc["leader"]))

    def __str__(self) -> str:
        role = "leader" if self.leader else "replica"
        return f"{self.topic} partition {self.partition}: {role} {self.source} → {self.target}"


def with_target(replicas: Sequence[str], step: Step) -> list[str]:
    """The replicas while the step's target catches up: the old ones and the target, last (a follower)."""
    return list(replicas) if step.target in replicas else [*replicas, step.target]


def without_source(replicas: Sequence[str], step: Step) -> list[str]:
    """The replicas once the step is done: the target in the source's place, the source gone."""
    if step.source not in replicas:
        return list(replicas)
    rest = [r for r in replicas if r != step.target]
    return [step.target if r == step.source else r for r in rest]


def loads(placements: Placements) -> tuple[dict[str, int], dict[str, int]]:
    """Replicas and leaders per broker."""
    replicas: dict[str, int] = {}
    leaders: dict[str, int] = {}
    for parts in placements.values():
        for reps in parts.values():
            for i, node in enumerate(reps):
                replicas[node] = replicas.get(node, 0) + 1
                leaders[node] = leaders.get(node, 0) + (i == 0)
    return replicas, leaders


def plan(placements: Placements, brokers: Iterable[str], remove: Iterable[str] = ()) -> list[Step]:
    """The steps that balance `placements` over `brokers` minus `remove`. Raises CannotPlan when a partition
    has more replicas than there are brokers to hold them."""
    nodes = sorted(set(brokers) - set(remove))
    parts = {(topic, int(pid)): list(reps) for topic, by_pid in placements.items() for pid, reps in by_pid.items()}
    # per broker, the partitions it leads and those it follows, in key order (then in the order they arrive)
    led: dict[str, dict] = {n: {} for n in nodes}
    followed: dict[str, dict] = {n: {} for n in nodes}
    for key in sorted(parts):
        for i, node in enumerate(parts[key]):
            if node in led:
                (led if i == 0 else followed)[node][key] = None
    steps: list[Step] = []

    def load(n: str) -> int:
        return len(led[n]) + len(followed[n])

    def move(key: tuple[str, int], source: str, target: str) -> None:
        reps = parts[key]
        index = reps.index(source)
        reps[index] = target
        side = led if index == 0 else followed
        if source in side:
            del side[source][key]
        side[target][key] = None
        steps.append(Step(key[0], key[1], source, target, index == 0))

    for key in sorted(parts):  # 1. off the brokers that go
        for node in list(parts[key]):
            if node in led:
                continue
            free = [n for n in nodes if n not in parts[key]]
            if not free:
                left = f"{len(nodes)} broker{'' if len(nodes) == 1 else 's'}"
                raise CannotPlan(f"topic {key[0]} partition {key[1]} has {len(parts[key])} replicas and {left} "
                                 f"would be left to hold them")
            lead = parts[key][0] == node
            move(key, node, min(free, key=lambda n: (load(n), len(led[n]) if lead else 0, n)))

    while True:  # 2. from the most loaded to the least loaded, while they differ by two or more
        found = _best_move(parts, nodes, load, led, followed)
        if found is None:
            return steps
        move(*found)


def _best_move(parts, nodes, load, led, followed) -> tuple[tuple[str, int], str, str] | None:
    donors = sorted(nodes, key=lambda n: (-load(n), n))
    receivers = sorted(nodes, key=lambda n: (load(n), n))
    for donor in donors:
        for receiver in receivers:
            if load(donor) - load(receiver) < 2:
                break
            sides = (led, followed) if len(led[donor]) - len(led[receiver]) >= 2 else (followed, led)
            for side in sides:
                key = next((k for k in side[donor] if receiver not in parts[k]), None)
                if key is not None:
                    return key, donor, receiver
    return None
