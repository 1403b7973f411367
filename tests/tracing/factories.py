"""Rows of the tracing lookup table made by hand (the job's own loading is tested in test_index_job)."""

import json
from datetime import UTC, datetime, timedelta

from apps.accounts.models import Team
from apps.clusters.models import Cluster
from apps.topics.models import Topic
from apps.tracing.models import TracedMessage

BASE = datetime(2026, 1, 1, tzinfo=UTC)
BASE_US = int(BASE.timestamp() * 1_000_000)


def message(message_id, *, topic="orders", business_id=None, key=None, minutes=0, final_state="acked",
            groups=None, steps=(), timeline=None, cluster="prod-a", at=None):
    """steps: (ms offset, event, group, attempt) tuples, written as its timeline (or `timeline`: the events as
    the index writes them, dicts of their fields that are set)."""
    at = at or BASE + timedelta(minutes=minutes)
    groups = groups if groups is not None else [{"group": "billing", "state": final_state, "attempts": 1,
                                                 "deliveries": 1, "nacks": 0, "timeouts": 0,
                                                 "first_delivered_us": None, "ended_us": None, "latency_us": None,
                                                 "last_consumer": "c1", "detail": None}]
    if timeline is None:
        timeline = []
        for i, (ms, event, group, attempt) in enumerate(steps):
            e = {"event_id": f"{message_id}-{i}", "ts_us": BASE_US + minutes * 60_000_000 + int(ms * 1000), "rank": 0,
                 "event": event, "group": group, "attempt": attempt, "consumer": "c1" if group else None}
            timeline.append({k: v for k, v in e.items() if v is not None})
    return TracedMessage.objects.create(
        message_id=message_id, topic=topic, message_type="normal", key=key, business_id=business_id,
        cluster=cluster, app_id="shop", producer_host="10.0.0.5:4100", broker="node-1", size=10, first_at=at,
        last_at=at, published_at=at, stored_at=at, final_state=final_state,
        final_states=sorted({g["state"] for g in groups}) or [final_state], attempts=1, event_count=len(steps),
        groups=groups, timeline=json.dumps(timeline), indexed_at=at)


def cluster(name: str, environment: str) -> Cluster:
    """A cluster row (no ZooKeeper behind it): what names a traced message's environment."""
    return Cluster.objects.create(name=name, environment=environment, region="local", zk_connect="127.0.0.1:1",
                                  zk_chroot=f"/sy/{name}")


def topic(name: str, team: str, on: Cluster) -> Topic:
    """A topic row owned by `team` (made if missing): what decides who may trace its messages."""
    owner, _ = Team.objects.get_or_create(name=team, defaults={"display_name": team.title()})
    return Topic.objects.create(name=name, team=owner, environment=on.environment, cluster=on,
                                message_types=["created"], expected_peak_mps=10)
