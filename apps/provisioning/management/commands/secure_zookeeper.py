"""`manage.py secure_zookeeper NAME [NAME...] | --all`: give every node of a cluster's chroot its ACL."""

from django.core.management.base import BaseCommand, CommandError

from apps.audit.context import action_context
from apps.clusters.models import Cluster
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.provisioning.secure import secure_cluster
from control_plane import actors


class Command(BaseCommand):
    help = ("Apply the ZooKeeper ACLs of docs/security.md to every node under each cluster's chroot (creating "
            "the chroot and /brokers when missing). Safe to run again: nodes already right are left alone.")

    def add_arguments(self, parser):
        parser.add_argument("clusters", nargs="*", metavar="NAME", help="cluster names")
        parser.add_argument("--all", action="store_true", help="every cluster")

    def handle(self, *args, clusters, all: bool = False, **options):
        if bool(clusters) == all:
            raise CommandError("name one or more clusters, or give --all (not both)")
        if all:
            targets = list(Cluster.objects.order_by("name"))
        else:
            found = {c.name: c for c in Cluster.objects.filter(name__in=clusters)}
            unknown = [n for n in clusters if n not in found]
            if unknown:
                known = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none"
                raise CommandError(f"no cluster named {', '.join(unknown)} (known: {known})")
            targets = [found[n] for n in clusters]
        failures = 0
        for cluster in targets:
            self.stdout.write(f"cluster {cluster.name} ({cluster.zk_connect}{cluster.zk_chroot}):")
            try:
                with action_context("cli"):
                    report = secure_cluster(cluster, actor=actors.ZK_SECURE, progress=self._progress)
            except ZooKeeperUnreachable as exc:
                failures += 1
                self.stderr.write(f"  not secured: {exc}")
                continue
            for line in report.failed:
                self.stderr.write(f"  failed: {line}")
            failures += bool(report.failed)
            style = self.style.WARNING if report.failed else self.style.SUCCESS
            self.stdout.write(style(f"  {report.nodes} nodes: {report.changed} secured now, {report.already} "
                                    f"already secured, {len(report.failed)} failed"))
        if failures:
            raise CommandError(f"{failures} of {len(targets)} clusters not fully secured (see above)")

    def _progress(self, report, depth: int) -> None:
        self.stdout.write(f"  depth {depth}: {report.nodes} nodes seen, {report.changed} secured now")
