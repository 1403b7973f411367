"""`manage.py move_topic TOPIC --env E --to CLUSTER [--dead-letters move|discard] [--wait]`, and on the same
topic `--status`, `--rollback [--wait]`, `--resume [--wait]` (docs/migration.md)."""

import time

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.audit.context import action_context
from apps.clusters.models import Cluster
from apps.moves import actions
from apps.moves.choices import DeadLetters
from apps.moves.models import TopicMove
from apps.topics.models import Topic
from control_plane import actors
from control_plane.errors import ActionError


def _refusal(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "\n".join(f"{field}: {message}" for field, messages in exc.message_dict.items() for message in messages)
    return "\n".join(exc.messages)


class Command(BaseCommand):
    help = ("Move a topic to another cluster of its environment while its clients keep running (a Celery worker "
            "does the steps); --wait prints the progress until the move ends. --status, --rollback and --resume "
            "act on the topic's latest move.")

    def add_arguments(self, parser):
        parser.add_argument("topic", help="the topic's name")
        parser.add_argument("--env", required=True, help="the topic's environment (dev, test, staging, prod)")
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--to", metavar="CLUSTER", help="start a move to this cluster")
        what.add_argument("--status", action="store_true", help="show the topic's latest move and its steps")
        what.add_argument("--rollback", action="store_true", help="roll the topic's move back to its source")
        what.add_argument("--resume", action="store_true", help="run a failed move's step again")
        parser.add_argument("--dead-letters", choices=DeadLetters.values,
                            help="move the source's dead letters to the target, or discard them (required when "
                                 "the source holds some)")
        parser.add_argument("--follow-s", type=int, help="seconds clients get to follow a route change (default 5)")
        parser.add_argument("--wait", action="store_true", help="print progress until the move ends")
        parser.add_argument("--as-user", dest="as_user", help="act as this user (default: system:moves)")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between progress checks")

    def handle(self, *args, topic, env, to, status, rollback, resume, dead_letters, follow_s, wait, as_user,
               interval, **options):
        the_topic = Topic.objects.filter(name=topic, environment=env).select_related("cluster").first()
        if the_topic is None:
            raise CommandError(f"no topic {topic!r} in environment {env!r}")
        actor = actors.MOVES
        if as_user:
            actor = get_user_model().objects.filter(username=as_user, is_active=True).first()
            if actor is None:
                raise CommandError(f"no active user named {as_user!r}")
        latest = TopicMove.objects.filter(topic=the_topic).select_related("source", "target").first()
        try:
            with action_context("cli"):
                if to:
                    cluster = Cluster.objects.filter(name=to).first()
                    if cluster is None:
                        names = ", ".join(Cluster.objects.filter(environment=env).values_list("name", flat=True))
                        raise CommandError(f"no cluster named {to!r} (clusters of {env}: {names or 'none'})")
                    move = actions.start_move(actor=actor, topic=the_topic, target=cluster, dead_letters=dead_letters,
                                              client_follow_s=follow_s)
                    self.stdout.write(f"move #{move.pk} started: {topic} {the_topic.cluster.name} → {cluster.name}")
                else:
                    if latest is None:
                        raise CommandError(f"topic {topic} ({env}) has never been moved")
                    move = latest
                    if rollback:
                        move = actions.rollback_move(actor=actor, move=move)
                        self.stdout.write(f"move #{move.pk}: rolling back to {move.source.name}")
                    elif resume:
                        move = actions.resume_move(actor=actor, move=move)
                        self.stdout.write(f"move #{move.pk}: resumed at {move.get_step_display()}")
        except ValidationError as exc:
            raise CommandError(f"refused:\n{_refusal(exc)}") from exc
        except (ActionError, PermissionDenied) as exc:
            raise CommandError(str(exc)) from exc
        if status or not wait:
            if status:
                self._show(move)
            return
        self._follow(move, interval)

    def _line(self, move: TopicMove) -> str:
        step = move.steps.filter(name=move.step).first()
        summary = f": {step.summary}" if step and step.summary else ""
        error = f" [error, attempt {step.attempts}: {step.error[:200]}]" if step and step.error else ""
        return f"move #{move.pk} {move.state} · {move.get_step_display()}{summary}{error}"

    def _show(self, move: TopicMove) -> None:
        self.stdout.write(f"move #{move.pk} of {move.topic.name}: {move.source.name} → {move.target.name}, "
                          f"{move.get_state_display()}, started by {move.requested_as} at {move.created_at:%Y-%m-%d %H:%M:%S}")
        for step in move.steps.all():
            self.stdout.write(f"  {step.position + 1:>2}. {step.get_name_display():<36} {step.state:<8} "
                              f"{step.summary}{f' [error: {step.error[:200]}]' if step.error else ''}")
        if move.error:
            self.stdout.write(f"  error: {move.error}")

    def _follow(self, move: TopicMove, interval: float) -> None:
        last = None
        while True:
            move = TopicMove.objects.select_related("topic", "source", "target").get(pk=move.pk)
            line = self._line(move)
            if line != last:
                self.stdout.write(line)
                self.stdout.flush()
                last = line
            if not move.active:
                break
            time.sleep(interval)
        self._show(move)
        if move.state == "failed":
            raise CommandError(f"move #{move.pk} failed at {move.get_step_display()}: {move.error} — resume it "
                               f"(--resume) once the cause is dealt with, or roll it back (--rollback)")
