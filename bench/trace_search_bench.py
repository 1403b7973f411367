"""Trace search bench: what a search page and a lookup cost through the REST API, for an auditor (every message)
and a developer (the messages of their teams' topics), on the first page and deep in the pages.

    . <state>/env.sh          # a stack from ./dev (PostgreSQL)
    .venv/bin/python bench/trace_search_bench.py [--messages 1000000] [--requests 200]

Makes a database of its own (`switchyard_bench_search`, dropped at the end unless --keep), fills
`tracing_message` with N rows by one INSERT … SELECT (20 topics of one cluster, half owned by each of two
teams; a key shared by 10 messages), and times requests of an in-process API client with an API token (Django and
DRF, no HTTP server): p50 and p99 of each kind. Figures only, no assertions; the machine is shared, so compare
figures from one run.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import drop_database, use_database  # noqa: E402

DB = "switchyard_bench_search"
TOPICS = 20
KEY_SPREAD = 10  # messages per key

FILL = """
INSERT INTO tracing_message (message_id, topic, message_type, key, business_id, cluster, app_id, producer_host,
    broker, size, first_at, last_at, published_at, stored_at, transaction_state, final_state, final_states,
    attempts, event_count, groups, timeline, indexed_at)
SELECT 'm-' || lpad(i::text, 9, '0'), 'topic-' || lpad((i %% %(topics)s)::text, 2, '0'), 'normal',
    'cust-' || (i %% %(keys)s), 'order-' || i, 'prod-a', 'shop', '10.0.0.5:4100', 'node-1', 100,
    ts, ts, ts, ts, NULL, 'acked', '{acked}', 1, 4,
    '[{"group": "billing", "state": "acked", "attempts": 1, "deliveries": 1, "nacks": 0, "timeouts": 0}]',
    '[]', now()
FROM (SELECT i, timestamptz '2026-01-01' + i * interval '10 milliseconds' AS ts
      FROM generate_series(0, %(n)s - 1) AS i) AS rows
"""


def fill(messages: int) -> None:
    from django.contrib.auth.models import Group, User
    from django.db import connection

    from apps.accounts.models import Team
    from apps.accounts.roles import sync_role_groups
    from apps.clusters.models import Cluster
    from apps.topics.models import Topic

    sync_role_groups()
    cluster = Cluster.objects.create(name="prod-a", environment="prod", region="local", zk_connect="127.0.0.1:1",
                                     zk_chroot="/bench/prod-a")
    teams = [Team.objects.create(name=name, display_name=name) for name in ("payments", "logistics")]
    for i in range(TOPICS):
        Topic.objects.create(name=f"topic-{i:02d}", team=teams[i % 2], environment="prod", cluster=cluster,
                             message_types=["normal"], expected_peak_mps=100)
    auditor = User.objects.create_user("bench-auditor")
    auditor.groups.set(Group.objects.filter(name="auditor"))
    developer = User.objects.create_user("bench-dev")
    developer.groups.set(Group.objects.filter(name="developer"))
    teams[0].members.add(developer)
    t = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(FILL, {"n": messages, "topics": TOPICS, "keys": max(1, messages // KEY_SPREAD)})
        cur.execute("ANALYZE tracing_message")
    print(f"filled {messages:,} messages in {time.perf_counter() - t:.0f} s")


def deep_cursor(topic: str, position: int) -> str:
    """The cursor a reader following the next links would hold at `position` in the topic's list."""
    from apps.tracing.models import TracedMessage
    from apps.tracing.paging import NEWEST_FIRST, encode

    return encode(TracedMessage.objects.filter(topic=topic).order_by(*NEWEST_FIRST)[position], back=False)


def timed(client, path: str, params: dict, status: int, requests: int) -> tuple[float, float]:
    def once() -> float:
        t = time.perf_counter()
        response = client.get(path, params)
        elapsed = (time.perf_counter() - t) * 1000
        assert response.status_code == status, (path, params, response.status_code, response.content[:300])
        return elapsed

    for _ in range(20):
        once()  # warm caches (the permission cache, PostgreSQL's buffers)
    samples = sorted(once() for _ in range(requests))
    return statistics.median(samples), samples[max(0, int(len(samples) * 0.99) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    args = parser.parse_args()
    use_database(DB)
    from django.contrib.auth.models import User
    from django.test.utils import setup_test_environment
    from rest_framework.test import APIClient

    from apps.accounts.models import ApiToken

    setup_test_environment()  # lets the in-process client's host through ALLOWED_HOSTS
    logging.getLogger("django.request").setLevel(logging.ERROR)  # the refused lookups are meant
    try:
        fill(args.messages)
        clients = {}
        for name in ("bench-auditor", "bench-dev"):  # by API token, as callers do: the user is read per request
            _, secret = ApiToken.objects.create(user=User.objects.get(username=name), expiry=timedelta(hours=1),
                                                name="bench")
            clients[name] = APIClient()
            clients[name].credentials(HTTP_AUTHORIZATION=f"Token {secret}")
        per_topic = args.messages // TOPICS
        own, other = "topic-00", "topic-01"  # payments' and logistics' topics
        url = "/api/v1/traces/messages/"
        cases = [
            ("lookup by id, auditor", "bench-auditor", f"{url}m-{1:09d}/", {}, 200),
            ("lookup by id, developer, own team's", "bench-dev", f"{url}m-{0:09d}/", {}, 200),
            ("lookup by id, developer, another team's (403)", "bench-dev", f"{url}m-{1:09d}/", {}, 403),
            ("key search, auditor", "bench-auditor", url, {"key": "cust-7"}, 200),
            ("key search, developer", "bench-dev", url, {"key": "cust-7"}, 200),
            ("topic search page 1, auditor", "bench-auditor", url, {"topic": own}, 200),
            ("topic search page 1, developer", "bench-dev", url, {"topic": own}, 200),
            (f"topic search at message {per_topic // 2:,}, auditor", "bench-auditor", url,
             {"topic": own, "cursor": deep_cursor(own, per_topic // 2)}, 200),
            (f"topic search at message {per_topic // 2:,}, developer", "bench-dev", url,
             {"topic": own, "cursor": deep_cursor(own, per_topic // 2)}, 200),
            ("another team's topic, developer (empty)", "bench-dev", url, {"topic": other}, 200),
            ("cluster only page 1, auditor (no index)", "bench-auditor", url, {"cluster": "prod-a"}, 200),
            ("cluster only page 1, developer (no index)", "bench-dev", url, {"cluster": "prod-a"}, 200),
        ]
        print(f"{args.messages:,} messages, {TOPICS} topics, {args.requests} requests each, page size 50")
        for label, who, path, params, status in cases:
            requests = args.requests if "no index" not in label else max(5, args.requests // 20)
            p50, p99 = timed(clients[who], path, params, status, requests)
            print(f"  {label:<52} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms")
    finally:
        if not args.keep:
            drop_database(DB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
