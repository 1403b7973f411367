"""Dead-letter listing and re-drive through the broker admin API, with a real broker and ZooKeeper:
list by group and time range, re-drive listed ids (each delivered once), a second call re-drives
nothing, and a kill -9 + restart neither brings re-driven dead letters back nor delivers them again."""

from __future__ import annotations

import time

from broker_core.client import Consumer, Producer
from tests.broker.conftest import APP, wait_for
from tests.broker.helpers import Received
from tests.broker.tx_helpers import TOKEN, admin

TOPIC, GROUP = "orders", "billing"


def dead_letter(cluster, broker, bodies: list[bytes]) -> list[str]:
    """Publish messages that a refusing consumer sends to the dead-letter queue (delivery limit 1)."""
    refused = Received()
    with Producer(**cluster.client_kwargs()) as producer:
        ids = producer.send_many(TOPIC, bodies)
    before = broker.group_stats(TOPIC, GROUP).get("dead_lettered", 0)
    with Consumer(TOPIC, GROUP, refused.handler("refuser", fail=lambda m: True), **cluster.client_kwargs()):
        wait_for(lambda: broker.group_stats(TOPIC, GROUP).get("dead_lettered", 0) >= before + len(ids), 30,
                 "the messages to be dead-lettered")
    return ids


def listed(broker, query: str = "") -> list[dict]:
    out, after = [], None
    while True:
        path = f"/admin/dlq?topic={TOPIC}&group={GROUP}&limit=3{query}" + (f"&after={after}" if after else "")
        status, page = admin(broker, "GET", path)
        assert status == 200, page
        out += page["dead_letters"]
        after = page["next_after"]
        if not after:
            return out


def redrive(broker, ids: list[str]) -> dict:
    status, answer = admin(broker, "POST", "/admin/dlq/redrive", {"topic": TOPIC, "group": GROUP, "message_ids": ids})
    assert status == 200, answer
    return answer


def test_list_redrive_once_and_never_again_after_restart(cluster):
    cluster.standard(TOPIC)
    cluster.pv.binding(TOPIC, GROUP, APP, delivery_limit=1, backoff_initial_ms=10, backoff_max_ms=10)
    cluster.pv.binding(TOPIC, "audit", APP)  # another group: a re-drive is for its group only
    broker = cluster.broker(admin_token=TOKEN)

    early = dead_letter(cluster, broker, [b"early %d" % i for i in range(4)])
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    late = dead_letter(cluster, broker, [b"late %d" % i for i in range(5)])

    everything = listed(broker)
    assert sorted(d["message_id"] for d in everything) == sorted(early + late)
    assert all(d["group"] == GROUP and d["topic"] == TOPIC and d["app_id"] == APP and d["attempts"] == 1
               and d["cause"] for d in everything)
    assert [d["dead_ms"] for d in everything] == sorted(d["dead_ms"] for d in everything)
    assert sorted(d["message_id"] for d in listed(broker, f"&since_ms={boundary_ms}")) == sorted(late)
    assert sorted(d["message_id"] for d in listed(broker, f"&until_ms={boundary_ms}")) == sorted(early)

    audit = Received()
    got = Received()
    with Consumer(TOPIC, GROUP, got.handler("c"), **cluster.client_kwargs()), \
            Consumer(TOPIC, "audit", audit.handler("a"), **cluster.client_kwargs()):
        wait_for(lambda: audit.count("a") == len(early + late), 20, "the audit group's own deliveries")
        chosen = late + [early[0]]
        first = redrive(broker, chosen + ["never-dead"])
        assert sorted(first["redriven"]) == sorted(chosen)
        assert first["skipped"] == [{"message_id": "never-dead", "reason": "not_dead_lettered"}]
        wait_for(lambda: set(chosen) <= set(got.ids("c")), 20, "the re-driven messages")
        second = redrive(broker, chosen)
        assert second["redriven"] == []
        assert sorted(s["message_id"] for s in second["skipped"]) == sorted(chosen)
        assert {s["reason"] for s in second["skipped"]} == {"already_redriven"}
        time.sleep(2.0)  # acks are fsynced within a second; then a kill -9 cannot cost a redelivery
        assert sorted(got.ids("c")) == sorted(chosen), "each re-driven message delivered once, to its group"
        assert audit.count("a") == len(early + late), "the other group got nothing again"
        remaining = sorted(early[1:])
        assert sorted(d["message_id"] for d in listed(broker)) == remaining
        assert broker.group_stats(TOPIC, GROUP)["dead_letter_queue"] == len(remaining)

        broker.restart()  # SIGKILL and start again
        assert sorted(d["message_id"] for d in listed(broker)) == remaining
        assert redrive(broker, chosen)["redriven"] == []
        wait_for(lambda: broker.group_stats(TOPIC, GROUP).get("consumers") == 1, 20, "the consumer to come back")
        time.sleep(1.0)
        assert sorted(got.ids("c")) == sorted(chosen), "nothing re-driven came back after the restart"
    assert broker.group_stats(TOPIC, GROUP)["dead_letter_queue"] == len(remaining)


def test_redrive_is_a_fresh_delivery_with_attempt_one(cluster):
    cluster.standard(TOPIC)
    cluster.pv.binding(TOPIC, GROUP, APP, delivery_limit=2, backoff_initial_ms=10, backoff_max_ms=10)
    broker = cluster.broker(admin_token=TOKEN)
    ids = dead_letter(cluster, broker, [b"a", b"b"])
    attempts: list[tuple[str, int]] = []

    def handle(m):
        attempts.append((m.id, m.attempt))

    with Consumer(TOPIC, GROUP, handle, **cluster.client_kwargs()):
        assert sorted(redrive(broker, ids)["redriven"]) == sorted(ids)
        wait_for(lambda: len(attempts) == 2, 20, "the re-driven messages")
    assert sorted(attempts) == sorted((i, 1) for i in ids)


def test_dlq_of_unknown_topic_or_group_is_empty(cluster):
    cluster.standard(TOPIC)
    broker = cluster.broker(admin_token=TOKEN)
    status, page = admin(broker, "GET", "/admin/dlq?topic=nope&group=none")
    assert status == 200 and (page["dead_letters"], page["next_after"], page["total"]) == ([], None, 0)
    answer = redrive(broker, ["x"])
    assert answer == {"redriven": [], "skipped": [{"message_id": "x", "reason": "not_dead_lettered"}]}
