"""`manage.py redrive --cluster C --topic T --group G [--since ISO --until ISO | --ids a,b] [--wait]`."""

import time
from datetime import UTC

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime

from apps.audit.context import action_context
from apps.clusters.models import Cluster
from apps.transactions import actions
from apps.transactions.models import Redrive
from control_plane import actors
from control_plane.errors import ActionError


def _when(value: str | None, name: str):
    if not value:
        return None
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"--{name}: not an ISO date-time: {value!r} (e.g. 2025-01-31T08:00:00Z)")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


class Command(BaseCommand):
    help = "Re-drive a group's dead letters (by time range or ids) through a Celery task; --wait prints progress."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--topic", required=True)
        parser.add_argument("--group", required=True)
        parser.add_argument("--since", help="ISO date-time (UTC unless it says otherwise)")
        parser.add_argument("--until", help="ISO date-time")
        parser.add_argument("--ids", help="comma-separated message ids (instead of a time range)")
        parser.add_argument("--wait", action="store_true", help="print progress until the re-drive ends")
        parser.add_argument("--as-user", dest="as_user", help="act as this user (default: the system)")
        parser.add_argument("--interval", type=float, default=0.5, help="seconds between progress lines")

    def handle(self, *args, cluster, topic, group, since, until, ids, wait, as_user, interval, **options):
        target = Cluster.objects.filter(name=cluster).first()
        if target is None:
            names = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"no cluster named {cluster!r} (known: {names})")
        actor = actors.REDRIVE
        if as_user:
            actor = get_user_model().objects.filter(username=as_user).first()
            if actor is None:
                raise CommandError(f"no user named {as_user!r}")
        message_ids = [i.strip() for i in (ids or "").split(",") if i.strip()]
        try:
            with action_context("cli"):
                run = actions.request_redrive(actor=actor, cluster=target, topic=topic, group=group,
                                              since=_when(since, "since"), until=_when(until, "until"),
                                              message_ids=message_ids)
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        except (ActionError, PermissionDenied) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"re-drive #{run.pk} queued: {topic}/{group} on {target.name}")
        if not wait:
            return
        last = None
        while True:
            run = Redrive.objects.get(pk=run.pk)
            line = (f"re-drive #{run.pk} {run.state}: {run.done} re-driven, {run.skipped} skipped of {run.total} "
                    f"selected, {run.batches} batches")
            if line != last:
                self.stdout.write(line)
                self.stdout.flush()
                last = line
            if not run.active:
                break
            time.sleep(interval)
        if run.state == "failed":
            raise CommandError(f"re-drive #{run.pk} failed: {run.error}")
