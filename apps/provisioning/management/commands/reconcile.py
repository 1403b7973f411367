"""`manage.py reconcile --cluster NAME [--repair]`: compare a cluster with ZooKeeper, report drift, repair."""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.audit.context import action_context
from apps.clusters.models import Cluster
from apps.provisioning.reconcile import reconcile
from control_plane import actors


class Command(BaseCommand):
    help = "Compare every desired object of a cluster with its ZooKeeper; with --repair, fix the drift."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="cluster name")
        parser.add_argument("--repair", action="store_true", help="write missing/different nodes, delete unexpected")
        parser.add_argument("--json", action="store_true", help="print the run as JSON")

    def handle(self, *args, cluster, repair, json: bool = False, **options):
        target = Cluster.objects.filter(name=cluster).first()
        if target is None:
            names = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"no cluster named {cluster!r} (known: {names})")
        with action_context("cli"):
            run = reconcile(target, repair=repair, actor=actors.RECONCILE)
        if json:
            self.stdout.write(_json({"run": run.pk, "cluster": target.name, "reachable": run.reachable,
                                     "error": run.error, "checked": run.checked, "missing": run.missing,
                                     "unexpected": run.unexpected, "different": run.different,
                                     "repaired": run.repaired, "items": run.items}))
        else:
            self._report(run)
        if not run.reachable:
            raise CommandError(f"ZooKeeper of {target.name} is unreachable: {run.error}")

    def _report(self, run):
        out = self.stdout
        out.write(f"cluster {run.cluster.name}: {run.checked} objects checked in {run.duration_ms} ms")
        if not run.reachable:
            return
        out.write(f"drift: {run.missing} missing, {run.unexpected} unexpected, {run.different} different")
        for item in run.items:
            state = " (repaired)" if item["repaired"] else (f" (repair failed: {item['error']})" if item["error"]
                                                            else "")
            out.write(f"  {item['problem']:<10} {item['path']}{state}")
            for field, d in item["diff"].items():
                out.write(f"      {field}: wanted {_json(d['desired'])}, ZooKeeper has {_json(d['actual'])}")
        if run.repair:
            out.write(self.style.SUCCESS(f"repaired {run.repaired} of {len(run.items)}"))
        elif run.items:
            out.write("run again with --repair to fix")
        else:
            out.write(self.style.SUCCESS("no drift"))


def _json(value) -> str:
    return json.dumps(value, sort_keys=True)
