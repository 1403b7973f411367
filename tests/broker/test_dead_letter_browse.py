"""The dead-letter browser's broker side, with a real broker and ZooKeeper: a filtered listing (type, key,
business id, time) with its count and capped previews; delete of listed dead letters that a kill -9 and restart
does not bring back; copies to another topic; a group's position reset that skips exactly what was stored
before the reset time, also after a restart; bad input refused with nothing changed."""

from __future__ import annotations

import base64
import json
import time

import pytest

from broker_core.client import Consumer, Message, Producer
from tests.broker.conftest import APP, SECRET, wait_for
from tests.broker.helpers import RawConsumer, Received
from tests.broker.test_redrive import GROUP, TOPIC, dead_letter
from tests.broker.tx_helpers import TOKEN, admin


def page(broker, query: str) -> dict:
    status, answer = admin(broker, "GET", f"/admin/dlq?topic={TOPIC}&group={GROUP}{query}")
    assert status == 200, answer
    return answer


def ids_of(answer: dict) -> list[str]:
    return sorted(d["message_id"] for d in answer["dead_letters"])


def test_filtered_listing_with_previews_and_a_durable_delete(cluster):
    cluster.standard(TOPIC)
    cluster.pv.binding(TOPIC, GROUP, APP, delivery_limit=1, backoff_initial_ms=10, backoff_max_ms=10)
    broker = cluster.broker(admin_token=TOKEN)
    big = json.dumps({"order": 7, "note": "x" * 5000}).encode()
    messages = [Message(b'{"order": 1}', message_type="created", key="k1", business_id="order-1"),
                Message(b"\x00\x01\xff binary", message_type="paid", key="k2", business_id="order-2"),
                Message(big, message_type="paid", key="k1", business_id="order-3")]
    with Producer(**cluster.client_kwargs()) as producer:
        ids = producer.send_many(TOPIC, messages)
    before = broker.group_stats(TOPIC, GROUP).get("dead_lettered", 0)
    refused = Received()
    with Consumer(TOPIC, GROUP, refused.handler("r", fail=lambda m: True), **cluster.client_kwargs()):
        wait_for(lambda: broker.group_stats(TOPIC, GROUP).get("dead_lettered", 0) == before + 3, 30, "3 dead letters")
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    later = dead_letter(cluster, broker, [b"later"])

    assert page(broker, "")["total"] == 4
    assert ids_of(page(broker, "&message_type=paid")) == sorted(ids[1:])
    assert ids_of(page(broker, "&key=k1")) == sorted([ids[0], ids[2]])
    assert ids_of(page(broker, "&business_id=order-2")) == [ids[1]]
    assert ids_of(page(broker, f"&since_ms={boundary}")) == later
    first = page(broker, "&key=k1&limit=1")
    assert (first["total"], len(first["dead_letters"])) == (2, 1) and first["next_after"]
    assert "body_preview" not in first["dead_letters"][0]  # bodies only when asked for

    previews = {d["message_id"]: d for d in page(broker, "&preview_bytes=100")["dead_letters"]}
    assert base64.b64decode(previews[ids[0]]["body_preview"]) == b'{"order": 1}'
    assert not previews[ids[0]]["body_truncated"]
    assert base64.b64decode(previews[ids[1]]["body_preview"]) == b"\x00\x01\xff binary"
    assert (len(base64.b64decode(previews[ids[2]]["body_preview"])), previews[ids[2]]["body_size"],
            previews[ids[2]]["body_truncated"]) == (100, len(big), True)

    status, answer = admin(broker, "POST", "/admin/dlq/delete",
                           {"topic": TOPIC, "group": GROUP, "message_ids": [ids[0], ids[2], "never-dead"]})
    assert status == 200, answer
    assert sorted(answer["deleted"]) == sorted([ids[0], ids[2]])
    assert answer["skipped"] == [{"message_id": "never-dead", "reason": "not_dead_lettered"}]
    assert ids_of(page(broker, "")) == sorted([ids[1], *later])
    broker.restart()  # SIGKILL and start again: the delete is durable
    assert ids_of(page(broker, "")) == sorted([ids[1], *later])
    status, again = admin(broker, "POST", "/admin/dlq/redrive",
                          {"topic": TOPIC, "group": GROUP, "message_ids": [ids[0]]})
    assert (status, again["redriven"], again["skipped"]) == (200, [], [{"message_id": ids[0],
                                                                        "reason": "already_deleted"}])


def test_copy_to_another_topic_delivers_the_message_there(cluster):
    cluster.standard(TOPIC)
    cluster.pv.topic("orders-retry")
    cluster.pv.binding(TOPIC, GROUP, APP, delivery_limit=1, backoff_initial_ms=10, backoff_max_ms=10)
    cluster.pv.binding("orders-retry", "fixers", APP)
    broker = cluster.broker(admin_token=TOKEN)
    ids = dead_letter(cluster, broker, [b"one", b"two"])
    bad = [({"to_topic": TOPIC}, 400), ({"to_topic": "nope"}, 404), ({}, 400)]
    for extra, code in bad:
        status, answer = admin(broker, "POST", "/admin/dlq/copy",
                               {"topic": TOPIC, "group": GROUP, "message_ids": ids, **extra})
        assert status == code, answer
    status, answer = admin(broker, "POST", "/admin/dlq/copy",
                           {"topic": TOPIC, "group": GROUP, "message_ids": [ids[1]], "to_topic": "orders-retry"})
    assert (status, answer["copied"], answer["skipped"]) == (200, [ids[1]], [])
    got = Received()
    with Consumer("orders-retry", "fixers", got.handler("f"), **cluster.client_kwargs()):
        wait_for(lambda: got.ids("f") == [ids[1]], 20, "the copy delivered on the other topic")
    assert ids_of(page(broker, "")) == sorted(ids), "a copy leaves the dead letter where it was"


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_reset_skips_the_backlog_stored_before_the_time_and_stays_after_a_restart(cluster, storage):
    cluster.standard(TOPIC)
    cluster.pv.topic(TOPIC, storage=storage)
    cluster.pv.binding(TOPIC, GROUP, APP)
    cluster.pv.binding(TOPIC, "audit", APP)  # another group keeps its backlog
    broker = cluster.broker(admin_token=TOKEN)
    with Producer(**cluster.client_kwargs()) as producer:
        old = producer.send_many(TOPIC, [b"old %d" % i for i in range(50)])
        time.sleep(0.05)
        reset_ms = int(time.time() * 1000)
        time.sleep(0.05)
        new = producer.send_many(TOPIC, [b"new %d" % i for i in range(7)])
    wait_for(lambda: broker.group_stats(TOPIC, GROUP).get("depth") == 57, 20, "the backlog")

    for body, code, error in [({"before_ms": int(time.time() * 1000) + 3_600_000}, 400, "in_future"),
                              ({"before_ms": "yesterday"}, 400, "invalid"),
                              ({"group": "nobody", "before_ms": reset_ms}, 404, "unknown_group")]:
        status, answer = admin(broker, "POST", "/admin/group/reset", {"topic": TOPIC, "group": GROUP, **body})
        assert (status, answer["error"]) == (code, error), answer
    assert broker.group_stats(TOPIC, GROUP)["depth"] == 57, "refused resets changed nothing"

    status, answer = admin(broker, "POST", "/admin/group/reset", {"topic": TOPIC, "group": GROUP,
                                                                  "before_ms": reset_ms})
    assert (status, answer["skipped"], answer["before_ms"]) == (200, 50, reset_ms), answer
    assert broker.group_stats(TOPIC, GROUP)["depth"] == 7
    assert broker.group_stats(TOPIC, "audit")["depth"] == 57
    if storage == "file":
        broker.restart()  # SIGKILL right after the answer: the finishes were durable before it
        wait_for(lambda: broker.group_stats(TOPIC, GROUP).get("depth") == 7, 20, "the recovered backlog")
    got = Received()
    with Consumer(TOPIC, GROUP, got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: len(got.ids("c")) >= 7, 20, "the messages stored after the reset")
        time.sleep(0.5)
    assert sorted(got.ids("c")) == sorted(new)
    assert not set(old) & set(got.ids("c"))


def test_reset_takes_messages_in_flight_and_a_broadcast_groups_copies(cluster):
    """A consumer holding messages unacked: the reset takes them from it (its late ack is ignored); a broadcast
    group's consumers each lose their copies of what was stored before the time."""
    cluster.standard(TOPIC)
    cluster.pv.binding(TOPIC, GROUP, APP)
    cluster.pv.binding(TOPIC, "fanout", APP, mode="broadcast")
    broker = cluster.broker(admin_token=TOKEN)
    holder = RawConsumer(broker.address, APP, SECRET, TOPIC, GROUP, credit=10)
    watchers = [RawConsumer(broker.address, APP, SECRET, TOPIC, "fanout", credit=5) for _ in range(2)]
    for c in [holder, *watchers]:
        c.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            producer.send_many(TOPIC, [b"old %d" % i for i in range(30)])
        wait_for(lambda: len(holder.deliveries) == 10, 20, "10 messages in flight on the holder")
        wait_for(lambda: all(len(w.deliveries) == 5 for w in watchers), 20, "5 copies in flight on each watcher")
        status, answer = admin(broker, "POST", "/admin/group/reset", {"topic": TOPIC, "group": GROUP})
        assert (status, answer["skipped"]) == (200, 30), answer
        status, answer = admin(broker, "POST", "/admin/group/reset", {"topic": TOPIC, "group": "fanout"})
        assert (status, answer["skipped"]) == (200, 60), answer  # 30 copies per consumer lane
        holder.ack([seq for seq, _, _, _ in holder.deliveries])  # late: ignored
        stats = broker.group_stats(TOPIC, GROUP)
        assert (stats["depth"], stats["in_flight"], stats["acked"]) == (0, 0, 0)
        fanout = broker.group_stats(TOPIC, "fanout")
        assert (fanout["depth"], fanout["in_flight"]) == (0, 0)
        assert broker.stats()["topics"][TOPIC]["held"] == 0, "every group is done with every message"
    finally:
        for c in [holder, *watchers]:
            c.close()
