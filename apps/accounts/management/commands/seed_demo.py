"""Load the demo data: one user per role, two teams, two clusters (dev and prod) and, with --secrets-file,
the demo apps, topics, grants and bindings (approved through the workflow). Safe to run again."""

from pathlib import Path

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from django.db import transaction

from apps.accounts import actions as account_actions
from apps.accounts.models import Team
from apps.accounts.roles import ADMIN, APPROVER, AUDITOR, DEVELOPER, SRE, sync_role_groups
from apps.audit.context import action_context
from apps.clusters import actions as cluster_actions
from apps.clusters.models import Cluster
from apps.governance import demo

PASSWORD = "switchyard"
USERS = [
    ("dev-alice", [DEVELOPER], "payments"),
    ("dev-erin", [DEVELOPER], "logistics"),
    ("appr-bob", [APPROVER], "payments"),
    ("appr-frank", [APPROVER], "logistics"),
    ("sre-carol", [SRE], None),
    ("audit-dan", [AUDITOR], None),
]
TEAMS = [("payments", "Payments"), ("logistics", "Logistics")]
CLUSTERS = [  # name, environment, region, description, back-checks may call private/loopback addresses
    ("dev-a", "dev", "local-1", "Demo development cluster", True),  # check servers of a demo run on 127.0.0.1
    ("prod-a", "prod", "local-1", "Demo production cluster", False),
]


class Command(BaseCommand):
    help = "Create the demo users, teams and clusters (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--zk", default="127.0.0.1:27102", help="ZooKeeper connect string for the demo clusters")
        parser.add_argument("--broker-port-base", type=int, default=27120)
        parser.add_argument("--secrets-file", type=Path,
                            help="also create the demo apps, topics, grants and bindings; keep the apps' secrets here")

    @transaction.atomic
    def handle(self, *args, zk, secrets_file=None, **options):
        sync_role_groups()
        with action_context("cli"):
            admin = User.objects.filter(username="admin").first()
            if admin is None:
                admin = User.objects.create_superuser("admin", "admin@example.com", PASSWORD)
                admin.groups.add(Group.objects.get(name=ADMIN))
            for name, display in TEAMS:
                if not Team.objects.filter(name=name).exists():
                    account_actions.create_team(actor=admin, name=name, display_name=display)
            for username, roles, team in USERS:
                user = User.objects.filter(username=username).first()
                if user is None:
                    user = account_actions.create_user(actor=admin, username=username, password=PASSWORD,
                                                       email=f"{username}@example.com", roles=roles)
                if team and not user.teams.filter(name=team).exists():
                    account_actions.add_team_member(actor=admin, team=Team.objects.get(name=team), user=user)
            for name, env, region, description, allow_private in CLUSTERS:
                if not Cluster.objects.filter(name=name).exists():
                    cluster_actions.create_cluster(
                        actor=admin, name=name, environment=env, region=region, zk_connect=zk,
                        zk_chroot=f"/switchyard/{name}", storage_level="file", description=description,
                        backcheck_allow_private=allow_private,
                    )
            if secrets_file is not None:
                users = {u.username: u for u in User.objects.filter(
                    username__in=["dev-alice", "dev-erin", "appr-bob", "sre-carol"])}
                cast = demo.Cast(producer_dev=users["dev-alice"], consumer_dev=users["dev-erin"],
                                 approver=users["appr-bob"], sre=users["sre-carol"])
                demo.seed(Cluster.objects.filter(name__in=[c[0] for c in CLUSTERS]).order_by("name"), cast,
                          secrets_file)
        self.stdout.write(self.style.SUCCESS("demo data ready"))
