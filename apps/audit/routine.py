"""Routine events: records the platform's own sweeps write many times an hour, which would bury the changes
people made. The audit pages hide them by default and show each run of them as one group with its count
("tx.resolve × 412 between 10:00 and 10:05"); the "show routine events" filter lists them one by one. They
are recorded and chained like every other record: this is only how the log is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from operator import or_

from django.db.models import Case, Count, IntegerField, Max, Min, Q, QuerySet, Value, When


@dataclass(frozen=True)
class Routine:
    """Records of `actor` ("system:*": any system actor) with `action` ("*.provisioned": any action ending so)."""

    actor: str
    action: str
    why: str

    def q(self) -> Q:
        actor = Q(actor_name__startswith="system:") if self.actor == "system:*" else Q(actor_name=self.actor)
        action = Q(action__endswith=self.action[1:]) if self.action.startswith("*") else Q(action=self.action)
        return actor & action


ROUTINE = (
    Routine("system:tx-backcheck", "tx.resolve", "the back-check sweep's resolutions, every few seconds"),
    Routine("system:moves", "move.step_started", "each step of a topic move (its start, end and failure stay shown)"),
    Routine("system:moves", "move.step_done", "each step of a topic move"),
    Routine("system:rebalance", "rebalance.step_done", "each replica move of a rebalance (its start, end and failure "
            "stay shown)"),
    Routine("system:*", "*.provisioned", "an approved object landing in a cluster's ZooKeeper (the approval shows)"),
    Routine("system:*", "*.deprovisioned", "a removed object leaving a cluster's ZooKeeper (the decision shows)"),
)


def routine_q() -> Q:
    return reduce(or_, (r.q() for r in ROUTINE))


def is_routine(record) -> bool:
    return any(
        (record.actor_name.startswith("system:") if r.actor == "system:*" else record.actor_name == r.actor)
        and (record.action.endswith(r.action[1:]) if r.action.startswith("*") else record.action == r.action)
        for r in ROUTINE)


@dataclass(frozen=True)
class Group:
    """Routine records of one actor and action that fall between two shown records."""

    after_id: int | None  # the shown record this run follows in the list (newest first); None: above the first
    actor: str
    action: str
    count: int
    first_at: datetime
    last_at: datetime
    first_id: int
    last_id: int

    @property
    def since(self) -> str:
        return self.first_at.isoformat()

    @property
    def until(self) -> str:
        return (self.last_at + timedelta(microseconds=1)).isoformat()


def groups(routine: QuerySet, shown_ids: list[int], above: int | None, below: int | None) -> list[Group]:
    """The routine records of `routine` with ids in (below, above], grouped by the gap between shown records
    (`shown_ids`, newest first) they fall into, then by actor and action. `above`/`below` None: no bound."""
    if above is not None:
        routine = routine.filter(id__lte=above)
    if below is not None:
        routine = routine.filter(id__gt=below)
    # gap i: after shown_ids[i-1] (older than it) and newer than shown_ids[i]; gap 0 is above every shown record
    gap = Case(*(When(id__gt=pk, then=Value(i)) for i, pk in enumerate(shown_ids)),
               default=Value(len(shown_ids)), output_field=IntegerField()) if shown_ids else Value(0)
    rows = (routine.order_by().annotate(gap=gap).values("gap", "actor_name", "action")
            .annotate(count=Count("id"), first_at=Min("timestamp"), last_at=Max("timestamp"), first_id=Min("id"),
                      last_id=Max("id"))
            .order_by("gap", "-last_id"))
    return [Group(shown_ids[r["gap"] - 1] if r["gap"] else None, r["actor_name"], r["action"], r["count"],
                  r["first_at"], r["last_at"], r["first_id"], r["last_id"]) for r in rows]
