"""Rows of the tracing lookup tables made by hand (the job's own loading is tested in test_index_job)."""

from datetime import UTC, datetime, timedelta

from apps.tracing.models import TracedMessage, TraceEvent

BASE = datetime(2026, 1, 1, tzinfo=UTC)
BASE_US = int(BASE.timestamp() * 1_000_000)


def message(message_id, *, topic="orders", business_id=None, key=None, minutes=0, final_state="acked",
            groups=None, steps=()):
    """steps: (ms offset, event, group, attempt) tuples, written as its timeline."""
    at = BASE + timedelta(minutes=minutes)
    groups = groups if groups is not None else [{"group": "billing", "state": final_state, "attempts": 1,
                                                 "deliveries": 1, "nacks": 0, "timeouts": 0,
                                                 "first_delivered_us": None, "ended_us": None, "latency_us": None,
                                                 "last_consumer": "c1", "detail": None}]
    m = TracedMessage.objects.create(
        message_id=message_id, topic=topic, message_type="normal", key=key, business_id=business_id,
        cluster="prod-a", app_id="shop", producer_host="10.0.0.5:4100", broker="node-1", size=10, first_at=at,
        last_at=at, published_at=at, stored_at=at, final_state=final_state,
        final_states=sorted({g["state"] for g in groups}) or [final_state], attempts=1, event_count=len(steps),
        groups=groups, indexed_at=at)
    for i, (ms, event, group, attempt) in enumerate(steps):
        ts = BASE_US + minutes * 60_000_000 + int(ms * 1000)
        TraceEvent.objects.create(message_id=message_id, event_id=f"{message_id}-{i}", ts_us=ts, rank=0,
                                  at=datetime.fromtimestamp(ts / 1e6, UTC), event=event, group_name=group,
                                  attempt=attempt, consumer="c1" if group else None)
    return m
