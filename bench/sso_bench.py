"""SSO bench: LDAP login latency (first login, which makes the user, and later logins) and the LDAP sync's rate,
against a real slapd over StartTLS, with the group mapping applied through the actions layer.

    SWITCHYARD_KEEP_SERVICES=1 ./dev test --co -q >/dev/null   # starts PostgreSQL, Redis, ZooKeeper; keeps them; writes env.sh
    . .devstack/test/env.sh && .venv/bin/python bench/sso_bench.py [--users 300] [--logins 100]

It uses the bench database (switchyard_bench, dropped and re-created, dropped at the end) and a fresh slapd of
the stack's state folder, stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.governance_bench import BENCH_DB, percentile  # noqa: E402
from bench.stack import drop_database, recreate_database  # noqa: E402
from devstack.ldap import start_slapd, stop_slapd  # noqa: E402
from devstack.services import Ports  # noqa: E402

GROUPS = ["payments-devs", "platform-sre", "auditors"]
PASSWORD = "bench-directory-pw-1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=300, help="directory users (all log in once, then sync)")
    parser.add_argument("--logins", type=int, default=100, help="timed second logins")
    args = parser.parse_args()

    state = Path(os.environ["SWITCHYARD_STATE"])
    directory = start_slapd(state, Ports(int(os.environ["SWITCHYARD_PORT_BASE"])).ldap, fresh=True)
    recreate_database(BENCH_DB)
    os.environ.update({**directory.control_plane_environment(), "SWITCHYARD_LDAP_START_TLS": "1",
                       "SWITCHYARD_DB_NAME": BENCH_DB, "SWITCHYARD_DB_ROLE": "owner",
                       "DJANGO_SETTINGS_MODULE": "control_plane.settings"})
    try:
        run(directory, args)
    finally:
        stop_slapd(state)
        drop_database(BENCH_DB)


def run(directory, args) -> None:
    django.setup()
    # imported after django.setup(): models need the app registry, and settings read the environment set above
    from django.contrib.auth import authenticate
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import RequestFactory

    from apps.accounts import ldap_login, sso_actions
    from apps.accounts.models import Team
    from tests.sso.servers import DirectoryAdmin

    call_command("migrate", "--noinput", "-v", "0")
    admin = User.objects.create_superuser("bench-admin", password=None)
    team = Team.objects.create(name="payments", display_name="Payments")
    for group, role in zip(GROUPS, ("developer", "sre", "auditor"), strict=True):
        sso_actions.create_mapping(actor=admin, source="ldap", group=group, role=role, team=team)
    writer = DirectoryAdmin(directory)
    started = time.perf_counter()
    uids = [f"bench-{i:05d}" for i in range(args.users)]
    for i, uid in enumerate(uids):
        writer.add_user(uid, password=PASSWORD, groups=[GROUPS[i % len(GROUPS)]])
    print(f"directory: {args.users} users in {time.perf_counter() - started:.1f} s")

    request = RequestFactory().post("/login/", REMOTE_ADDR="127.0.0.1")

    def timed_login(uid: str) -> float:
        t0 = time.perf_counter()
        user = authenticate(request, username=uid, password=PASSWORD)
        elapsed = time.perf_counter() - t0
        assert user is not None, uid
        return elapsed

    first = [timed_login(uid) for uid in uids]
    again = [timed_login(uids[i % len(uids)]) for i in range(args.logins)]
    for name, values in (("first login (user made, mapped)", first), ("later login (mapped again)", again)):
        print(f"{name}: n={len(values)} median {statistics.median(values) * 1000:.1f} ms, "
              f"p99 {percentile(values, 99) * 1000:.1f} ms")

    for uid in uids[: len(uids) // 10]:
        writer.disable(uid)
    started = time.perf_counter()
    counts = ldap_login.sync_directory()
    took = time.perf_counter() - started
    writer.close()
    print(f"sync: {counts} in {took:.1f} s = {len(uids) / took:.0f} users/s")


if __name__ == "__main__":
    main()
