"""The steps of a move (docs/migration.md). Each one is idempotent: it looks at what is true now (the topic's
placements, what landed in ZooKeeper, what the brokers hold), makes the one change it is for if it has not
been made, and answers Done or Wait with the figures it read. The runner records them and calls it again
after a pause while it waits; a step run twice (a worker killed mid-way) changes nothing twice.

Placement changes go through apps.provisioning.placement (atomic, audited, route version bumped, pushed to
every cluster concerned), acting as the moves' system actor. A route change is relied on once its new
version has landed on the clusters concerned and the move's `client_follow_s` has passed since.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.moves import landing
from apps.moves.brokers import clients, drain_of, import_batches, import_client
from apps.moves.choices import DeadLetters, Step
from apps.moves.models import MoveStep, TopicMove
from apps.provisioning import actions as provisioning
from apps.provisioning import placement
from apps.provisioning.desired import holder_ids, topic_units
from apps.provisioning.models import Placement
from apps.topics.models import Topic
from control_plane import actors


@dataclass
class Wait:
    """Not there yet: record the figures, look again after `poll_s` (the default poll when None)."""

    summary: str
    progress: dict = field(default_factory=dict)
    poll_s: float | None = None


@dataclass
class Done:
    """The step is complete; `back_to` names an earlier step to run again (a source that filled up again)."""

    summary: str
    progress: dict = field(default_factory=dict)
    back_to: str | None = None


Outcome = Wait | Done


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def poll_s() -> float:
    return _setting("SWITCHYARD_MOVE_POLL_S", 0.5)


def _repush_s() -> float:
    return _setting("SWITCHYARD_MOVE_REPUSH_S", 10)


def _dlq_page() -> int:
    return int(_setting("SWITCHYARD_MOVE_DLQ_PAGE", 500))


# dead letters are moved for at most this long per run of the step (its figures are kept after each page)
DLQ_BUDGET_S = 10


@dataclass
class Ctx:
    move: TopicMove
    step: MoveStep
    topic: Topic
    now: datetime
    owner: str = ""  # the task holding the move's lease
    lease_s: float = 60

    @property
    def progress(self) -> dict:
        return self.step.progress

    def save_progress(self) -> None:
        """Keep the figures now (inside the caller's transaction when it has one: with the change they describe),
        and beat: the move's lease is extended for its task, which is still at work."""
        now = timezone.now()
        # the move's row first, then its step's: the order every action locks them in (a rollback locks the move,
        # then updates its steps); the other way round the two transactions deadlocked
        TopicMove.objects.filter(pk=self.move.pk, lease_owner=self.owner).update(
            heartbeat_at=now, lease_until=now + timedelta(seconds=self.lease_s))
        MoveStep.objects.filter(pk=self.step.pk).update(progress=self.step.progress, updated_at=now)

    def since(self, key: str) -> float | None:
        value = self.progress.get(key)
        return (self.now - datetime.fromisoformat(value)).total_seconds() if value else None

    def step_started(self, name: str) -> bool:
        return MoveStep.objects.filter(move=self.move, name=name, started_at__isnull=False).exists()


def load_topic(topic_id: int) -> Topic:
    return Topic.objects.select_related("cluster").prefetch_related("placements__cluster").get(pk=topic_id)


def _placement(topic: Topic, cluster) -> Placement | None:
    return next((p for p in topic.placements.all() if p.cluster_id == cluster.pk), None)


def _holds(topic: Topic, cluster) -> bool:
    return cluster.pk in holder_ids(topic)


def _repush(ctx: Ctx, cluster) -> None:
    """Push the topic's objects to `cluster` again when nothing landed for a while (a push task lost with a
    killed worker is otherwise only re-driven by the periodic reconcile, minutes later)."""
    waited = ctx.since("pushed_at")
    if waited is None or waited >= _repush_s():
        with transaction.atomic():
            provisioning.schedule_on_clusters([cluster.pk], topic_units(ctx.topic))
            ctx.progress["pushed_at"] = ctx.now.isoformat()
            ctx.progress["pushes"] = ctx.progress.get("pushes", 0) + 1
            ctx.save_progress()


# --- route changes -------------------------------------------------------------------------


Change = Callable[[Topic], Callable[[], object] | None]  # what to do to the topic's placements (None: nothing)


def _change_once(ctx: Ctx, change: Change, route: bool) -> None:
    """Make a placement change, recording in the same transaction that it was made (`changed`, and with `route`
    the route version it makes): a step run again after a crash in between then knows. The step's own rows
    are written before the audited placement action, whose audit records come last (apps.audit.recorder)."""
    with transaction.atomic():
        list(Topic.objects.select_for_update(of=("self",)).filter(pk=ctx.topic.pk).values_list("pk", flat=True))
        ctx.topic = load_topic(ctx.topic.pk)
        act = change(ctx.topic)
        ctx.progress["changed"] = act is not None
        ctx.progress["changed_at"] = ctx.now.isoformat()
        if route:
            ctx.progress["route_version"] = ctx.topic.route_version + (1 if act is not None else 0)
        ctx.save_progress()
        if act is not None:
            act()
    ctx.topic = load_topic(ctx.topic.pk)


def route_change(ctx: Ctx, change: Change, must_land: list, what: str) -> Outcome:
    """Make the placement change `change` once, then wait until the topic's route at the version it made has
    landed on `must_land` and clients had `client_follow_s` to follow it."""
    p = ctx.progress
    if "route_version" not in p:
        _change_once(ctx, change, route=True)
    if not p["changed"]:
        return Done(f"{what}: the route already said so (version {p['route_version']})", p)
    landed = landing.route_landed(ctx.topic, p["route_version"], must_land)
    p["landed"] = landed
    waiting = sorted(name for name, ok in landed.items() if not ok)
    if waiting:
        if (ctx.since("changed_at") or 0) >= _repush_s():
            for cluster in must_land:
                if cluster.name in waiting:
                    _repush(ctx, cluster)
        return Wait(f"{what}: route version {p['route_version']} not yet in ZooKeeper of {', '.join(waiting)}", p)
    p.setdefault("landed_at", ctx.now.isoformat())
    left = ctx.move.client_follow_s - (ctx.since("landed_at") or 0)
    if left > 0:
        return Wait(f"{what}: route version {p['route_version']} in every ZooKeeper; clients follow it "
                    f"({left:.0f} s left)", p, poll_s=min(left, 1.0))
    return Done(f"{what}: route version {p['route_version']} followed", p)


def _place(cluster, consume: bool) -> Change:
    def change(topic: Topic):
        current = _placement(topic, cluster)
        if cluster.pk == topic.cluster_id or (current is not None and current.consume == consume):
            return None
        return lambda: placement.place(actor=actors.MOVES, topic=topic, cluster=cluster, consume=consume)
    return change


def _serve_from(cluster) -> Change:
    def change(topic: Topic):
        if topic.cluster_id == cluster.pk:
            return None
        return lambda: placement.serve_from(actor=actors.MOVES, topic=topic, cluster=cluster)
    return change


def _unplace(cluster) -> Change:
    def change(topic: Topic):
        if not _holds(topic, cluster):
            return None
        return lambda: placement.unplace(actor=actors.MOVES, topic=topic, cluster=cluster)
    return change


# --- the forward steps ------------------------------------------------------------------------


def provision(ctx: Ctx) -> Outcome:
    """The target holds the topic (no clients there yet); wait until its objects landed there."""
    target = ctx.move.target
    if not _holds(ctx.topic, target):
        ctx.progress["pushed_at"] = ctx.now.isoformat()
        _change_once(ctx, _place(target, consume=False), route=False)
    status = landing.objects_on(ctx.topic, target)
    ctx.progress.update(status)
    if status["landed"] != status["objects"]:
        _repush(ctx, target)
        problem = (f"; {len(status['failed'])} failed: {status['errors'][0]}" if status["failed"] and status["errors"]
                   else "")
        return Wait(f"{status['landed']} of {status['objects']} objects in ZooKeeper of {target.name}{problem}",
                    ctx.progress)
    # landed in ZooKeeper; each broker of the target applies it from its watch: wait until all have
    grants, groups = landing.served_by(ctx.topic)
    lagging = drain_of(target, ctx.topic.name).not_applied(ctx.topic.revision, grants, groups)
    ctx.progress["brokers_lagging"] = lagging[:landing.SHOWN]
    if lagging:
        return Wait(f"{status['objects']} objects in ZooKeeper of {target.name}; brokers applying them: "
                    f"{'; '.join(lagging[:3])}", ctx.progress)
    return Done(f"{status['objects']} objects in ZooKeeper of {target.name}, applied by every broker there",
                ctx.progress)


def consume_both(ctx: Ctx) -> Outcome:
    move = ctx.move
    return route_change(ctx, _place(move.target, consume=True), [move.source, move.target],
                        f"consumers subscribe on {move.source.name} and {move.target.name}")


def switch_producers(ctx: Ctx) -> Outcome:
    move = ctx.move
    return route_change(ctx, _serve_from(move.target), [move.source, move.target],
                        f"producers send to {move.target.name}")


def drain(ctx: Ctx) -> Outcome:
    return drain_cluster(ctx, ctx.move.source, ctx.move.target)


def cutover(ctx: Ctx) -> Outcome:
    move = ctx.move
    return route_change(ctx, _place(move.source, consume=False), [move.source, move.target],
                        f"consumers subscribe on {move.target.name} only")


def deprovision(ctx: Ctx) -> Outcome:
    return deprovision_cluster(ctx, ctx.move.source, Step.DRAIN)


# --- the rollback steps -------------------------------------------------------------------------


def producers_switched(ctx: Ctx) -> bool:
    """Whether producers may have sent to the target: the forward step that switches them had started."""
    return ctx.topic.cluster_id == ctx.move.target_id or ctx.step_started(Step.SWITCH_PRODUCERS)


def rb_producers(ctx: Ctx) -> Outcome:
    move = ctx.move
    return route_change(ctx, _serve_from(move.source), [move.source], f"producers send to {move.source.name} again")


def rb_drain(ctx: Ctx) -> Outcome:
    if not _holds(ctx.topic, ctx.move.target):
        return Done(f"{ctx.move.target.name} does not hold the topic: nothing to drain", ctx.progress)
    if not producers_switched(ctx):
        return Done(f"producers never sent to {ctx.move.target.name}: nothing to drain", ctx.progress)
    return drain_cluster(ctx, ctx.move.target, ctx.move.source)


def rb_cutover(ctx: Ctx) -> Outcome:
    move = ctx.move
    if not _holds(ctx.topic, move.target):
        return Done(f"{move.target.name} does not hold the topic", ctx.progress)
    return route_change(ctx, _place(move.target, consume=False), [move.source],
                        f"consumers subscribe on {move.source.name} only")


def rb_deprovision(ctx: Ctx) -> Outcome:
    return deprovision_cluster(ctx, ctx.move.target, Step.RB_DRAIN, guard=producers_switched(ctx))


# --- draining and deprovisioning a cluster --------------------------------------------------------


def drain_cluster(ctx: Ctx, frm, to) -> Outcome:
    """Wait until `frm` holds nothing left to deliver (backlog, in flight, prepared transaction messages: all
    zero, seen twice), then deal with its dead letters as the move says."""
    p = ctx.progress
    figures = drain_of(frm, ctx.topic.name)
    p["figures"] = figures.as_dict()
    left = figures.total("backlog")  # in flight included
    p["peak"] = max(p.get("peak", 0), left)
    if not figures.empty:
        p["empty_seen"] = 0
        return Wait(f"{frm.name}: backlog {left:,} of {p['peak']:,} at most (in flight {figures.total('in_flight'):,}), "
                    f"prepared transaction messages {figures.prepared:,}", p)
    p["empty_seen"] = p.get("empty_seen", 0) + 1
    if p["empty_seen"] < 2:
        return Wait(f"{frm.name}: nothing left to deliver; confirming", p)
    dead = figures.total("dead_letters")
    if ctx.move.dead_letters == DeadLetters.DISCARD or dead == 0:
        p["dead_letters"] = {"choice": ctx.move.dead_letters, "left": dead}
        tail = f"; {dead:,} dead letters discarded with it (the move's choice)" if dead else ""
        return Done(f"{frm.name} drained{tail}", p)
    if not move_dead_letters(ctx, frm, to, figures.groups):
        dl = p["dlq"]
        return Wait(f"{frm.name} drained; dead letters to {to.name}: {dl['moved']:,} moved of {dead:,}", p,
                    poll_s=0)
    return Done(f"{frm.name} drained; {p['dlq']['moved']:,} dead letters moved to {to.name}", p)


def move_dead_letters(ctx: Ctx, frm, to, groups: dict) -> bool:
    """Export the dead letters of every group from every broker of `frm`, page by page, into one broker of `to`
    (the first registered, by node id: the import is idempotent by message id there). The cursor of each
    broker and group is kept in the figures, so a resumed step carries on. True when all are moved."""
    p = ctx.progress
    dl = p.setdefault("dlq", {"moved": 0, "skipped": 0, "cursors": {}, "done": []})
    deadline = time.monotonic() + DLQ_BUDGET_S
    sources = clients(frm)
    try:
        with import_client(to) as into:
            for source in sources:
                for group in sorted(g for g, f in groups.items() if f.get("dead_letters")):
                    key = f"{source.endpoint.node_id}/{group}"
                    while key not in dl["done"]:
                        page = source.export_dead_letters(topic=ctx.topic.name, group=group,
                                                          after=dl["cursors"].get(key), limit=_dlq_page())
                        letters = page.get("dead_letters") or []
                        for batch in import_batches(letters):
                            answer = into.import_dead_letters(topic=ctx.topic.name, group=group, dead_letters=batch)
                            skipped = len(answer.get("skipped") or []) if isinstance(answer.get("skipped"), list) \
                                else int(answer.get("skipped") or 0)
                            dl["skipped"] += skipped
                            dl["moved"] += len(batch) - skipped
                        dl["cursors"][key] = page.get("next_after")
                        if not page.get("next_after") or not letters:
                            dl["done"].append(key)
                        ctx.save_progress()
                        if time.monotonic() > deadline:
                            return False
    finally:
        for source in sources:
            source.close()
    return True


def deprovision_cluster(ctx: Ctx, frm, back_to: str, guard: bool = True) -> Outcome:
    """`frm` stops holding the topic: once more check it is empty (a late message sends the move back to
    draining it, consumers subscribing there again), unplace it, then wait until its ZooKeeper holds none of
    the topic's nodes and none of its brokers holds the topic."""
    p = ctx.progress
    if _holds(ctx.topic, frm):
        if guard:
            figures = drain_of(frm, ctx.topic.name)
            if not figures.empty:
                _change_once(ctx, _place(frm, consume=True), route=False)
                return Done(f"{figures.total('backlog'):,} messages reached {frm.name} after its drain: consumers "
                            f"subscribe there again and it is drained again", {"late": figures.as_dict()},
                            back_to=back_to)
        p["pushed_at"] = ctx.now.isoformat()
        _change_once(ctx, _unplace(frm), route=False)
    nodes = landing.leftovers(ctx.topic, frm)
    figures = drain_of(frm, ctx.topic.name)
    p.update(nodes_left=nodes[:landing.SHOWN], nodes=len(nodes), brokers=figures.brokers, holding=figures.holding)
    if not nodes and figures.holding == 0:
        return Done(f"{frm.name} holds nothing of the topic: no ZooKeeper node, none of its {figures.brokers} "
                    f"brokers holds it", p)
    if nodes:
        _repush(ctx, frm)
    return Wait(f"{frm.name}: {len(nodes)} nodes left in ZooKeeper, {figures.holding} of {figures.brokers} brokers "
                f"still hold the topic", p)


STEPS: dict[str, Callable[[Ctx], Outcome]] = {
    Step.PROVISION: provision, Step.CONSUME_BOTH: consume_both, Step.SWITCH_PRODUCERS: switch_producers,
    Step.DRAIN: drain, Step.CUTOVER: cutover, Step.DEPROVISION: deprovision,
    Step.RB_PRODUCERS: rb_producers, Step.RB_DRAIN: rb_drain, Step.RB_CUTOVER: rb_cutover,
    Step.RB_DEPROVISION: rb_deprovision,
}
