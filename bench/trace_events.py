"""Synthetic trace events for the bench: realistic message paths written by the broker's own trace writer."""

from __future__ import annotations

import random
from pathlib import Path

from broker_core.tracing.writer import TraceFileWriter

TOPICS = [f"topic-{i:02d}" for i in range(20)]


def message_id(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def business_id(n: int) -> str:
    return f"order-{n}"


def generate(folder: Path, target_events: int, *, seed: int = 7, start_us: int = 1_767_225_600_000_000,
             nodes: int = 2) -> tuple[int, int]:
    """Write about `target_events` events (two broker nodes, ~5 per message) as trace files, one record per
    event (the file format's worst case: no batch shares a record); return (events, messages)."""
    rng = random.Random(seed)
    writers = [TraceFileWriter(folder / f"node-{i}", node_id=f"node-{i}", cluster="bench",
                               max_bytes=64 * 1024 * 1024, max_age_s=10**9) for i in range(nodes)]
    events = messages = 0
    ts = start_us
    while events < target_events:
        w = writers[messages % nodes]
        mid, topic = message_id(messages), TOPICS[messages % len(TOPICS)]
        common = {"message_id": mid, "topic": topic, "message_type": "normal", "key": f"k-{messages % 5000}",
                  "business_id": business_id(messages)}
        ts += rng.randint(50, 150)  # ~10,000 messages a second: 5M events span about two minutes
        w.emit("published", **common, app_id="shop", client_host="127.0.0.1:40000", size=1024, ts_us=ts)
        w.emit("stored", **common, ts_us=ts + 200)
        events += 2
        for g in range(1 + (messages % 4 == 0)):
            group, t = f"group-{g}", ts + 1000
            roll = rng.random()
            attempts = 1 if roll < 0.9 else (3 if roll < 0.98 else 5)
            for attempt in range(1, attempts + 1):
                w.emit("delivered", **common, group=group, consumer=f"c-{g}", attempt=attempt, ts_us=t)
                t += 500
                last = attempt == attempts
                if last and attempts == 5:
                    w.emit("dead_lettered", **common, group=group, attempt=attempt, detail="limit", ts_us=t)
                elif last:
                    w.emit("acked", **common, group=group, consumer=f"c-{g}", attempt=attempt, ts_us=t)
                else:
                    w.emit("nacked", **common, group=group, consumer=f"c-{g}", attempt=attempt, ts_us=t)
                events += 2
                t += 1000
                if w.buffer.records > 200_000:
                    w.flush()
        messages += 1
    for w in writers:
        w.close()
    return events, messages
