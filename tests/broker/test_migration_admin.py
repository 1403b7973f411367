"""The admin endpoints a topic's migration between clusters uses, on real brokers over HTTP: the drain figures
fall to zero as a consumer acks and as prepared messages resolve; dead letters exported from one cluster's
broker are imported by another's once (also after a restart), and can be re-driven there."""

from __future__ import annotations

import base64
import shutil

from broker_core import protocol as p
from broker_core.client import Consumer, Producer
from tests.broker.conftest import APP, SECRET, Cluster, wait_for
from tests.broker.helpers import RawConsumer
from tests.broker.test_redrive import dead_letter
from tests.broker.tx_helpers import TOKEN, admin, drain

TOPIC, GROUP = "orders", "billing"


def group_drain(broker) -> dict:
    return drain(broker, TOPIC)["groups"][GROUP]


def test_drain_falls_to_zero_as_the_consumer_acks_and_prepared_messages_resolve(cluster):
    cluster.standard(TOPIC)
    cluster.pv.topic(TOPIC, transactional=True)
    cluster.pv.binding(TOPIC, GROUP, APP)
    broker = cluster.broker(admin_token=TOKEN)
    assert drain(broker, "elsewhere") == {"node_id": broker.node_id, "topic": "elsewhere", "held": False,
                                          "retired": False, "revision": None, "grants": [], "messages": 0,
                                          "prepared": 0, "groups": {}}
    assert admin(broker, "GET", "/admin/drain")[0] == 400
    assert admin(broker, "GET", f"/admin/drain?topic={TOPIC}", token="wrong")[0] == 401

    raw = RawConsumer(broker.address, APP, SECRET, TOPIC, GROUP, credit=2)
    raw.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            producer.send_many(TOPIC, [b"%d" % i for i in range(5)])
            commit, rollback = producer.prepare(TOPIC, b"commit me"), producer.prepare(TOPIC, b"roll me back")
            wait_for(lambda: len(raw.deliveries) == 2, 5, "two deliveries (credit 2)")
            figures = drain(broker, TOPIC)
            assert (figures["held"], figures["messages"], figures["prepared"]) == (True, 5, 2)
            assert figures["groups"][GROUP] == {"bound": True, "backlog": 5, "in_flight": 2, "dead_letters": 0,
                                                "consumers": 1}

            for acked, delivered in ((0, 2), (2, 4), (4, 5)):  # two in flight at a time
                wait_for(lambda n=delivered: len(raw.deliveries) == n, 5, "the next deliveries")
                raw.ack(seq for seq, _, _, _ in raw.deliveries[acked:delivered])
                wait_for(lambda n=delivered: group_drain(broker)["backlog"] == 5 - n, 5, "the backlog to fall")
            assert drain(broker, TOPIC)["messages"] == 0 and drain(broker, TOPIC)["prepared"] == 2

            assert producer.end_transaction(commit, True) == p.TX_COMMITTED
            wait_for(lambda: len(raw.deliveries) == 6, 5, "the committed message")
            assert (drain(broker, TOPIC)["prepared"], group_drain(broker)["backlog"]) == (1, 1)
            raw.ack([raw.deliveries[5][0]])
            assert producer.end_transaction(rollback, False) == p.TX_ROLLED_BACK
        wait_for(lambda: group_drain(broker)["backlog"] == 0, 5, "the last ack")
        assert drain(broker, TOPIC)["prepared"] == 0 and drain(broker, TOPIC)["messages"] == 0
    finally:
        raw.close()


def exported(broker) -> list[dict]:
    out, after = [], None
    while True:
        status, page = admin(broker, "GET", f"/admin/dlq/export?topic={TOPIC}&group={GROUP}&limit=2"
                                            + (f"&after={after}" if after else ""))
        assert status == 200, page
        out += page["dead_letters"]
        after = page["next_after"]
        if not after:
            return out


def import_(broker, entries: list[dict], group: str = GROUP) -> tuple[int, dict]:
    return admin(broker, "POST", "/admin/dlq/import", {"topic": TOPIC, "group": group, "dead_letters": entries})


def test_dead_letters_move_to_another_cluster_once_and_are_redriven_there(cluster, zk_hosts, zk):
    cluster.standard(TOPIC)
    cluster.pv.binding(TOPIC, GROUP, APP, delivery_limit=1, backoff_initial_ms=10, backoff_max_ms=10)
    source = cluster.broker(admin_token=TOKEN)
    ids = dead_letter(cluster, source, [b"body %d \xff" % i for i in range(5)])
    entries = exported(source)
    assert sorted(e["message_id"] for e in entries) == sorted(ids)
    assert {base64.b64decode(e["body"]) for e in entries} == {b"body %d \xff" % i for i in range(5)}
    assert all(e["attempts"] == 1 and e["cause"] and e["app_id"] == APP and e["received_ms"] <= e["dead_ms"]
               and e["headers"] == {} and e["ttl_ms"] == 0 for e in entries)

    (cluster.state / "target").mkdir()
    target = Cluster(zk_hosts, zk, f"{cluster.name}-t", cluster.state / "target")
    try:
        target.standard(TOPIC)
        target.pv.binding(TOPIC, GROUP, APP)
        dest = target.broker(admin_token=TOKEN)
        status, refused = import_(dest, entries, group="nobody")
        assert (status, refused["error"]) == (409, "not_provisioned")
        status, refused = import_(dest, [entries[0], {**entries[1], "body": "not base64!"}])
        assert (status, refused["error"]) == (400, "invalid") and "dead_letters[1].body" in refused["message"]
        assert exported(dest) == [], "a refused import stores nothing"

        status, first = import_(dest, entries[:3])
        assert status == 200 and first == {"imported": [e["message_id"] for e in entries[:3]], "skipped": []}
        status, second = import_(dest, entries)
        assert status == 200 and second["imported"] == [e["message_id"] for e in entries[3:]]
        assert second["skipped"] == [{"message_id": e["message_id"], "reason": "already_dead_lettered"}
                                     for e in entries[:3]]
        by_id = lambda rows: sorted(rows, key=lambda e: e["message_id"])  # noqa: E731
        assert by_id(exported(dest)) == by_id(entries), "the same dead letters, whole, on the target"

        dest.restart()  # SIGKILL and start: the import was durable, and stays idempotent
        status, again = import_(dest, entries)
        assert status == 200 and again["imported"] == []
        assert {s["reason"] for s in again["skipped"]} == {"already_dead_lettered"}

        gone, kept = entries[0], entries[1:]  # one is deleted on the target: importing it again never revives it
        status, deleted = admin(dest, "POST", "/admin/dlq/delete",
                                {"topic": TOPIC, "group": GROUP, "message_ids": [gone["message_id"]]})
        assert status == 200 and deleted["deleted"] == [gone["message_id"]]
        status, revived = import_(dest, [gone])
        assert status == 200 and revived == {"imported": [], "skipped": [{"message_id": gone["message_id"],
                                                                           "reason": "already_deleted"}]}
        assert by_id(exported(dest)) == by_id(kept)

        got = {}
        with Consumer(TOPIC, GROUP, lambda m: got.setdefault(m.id, m.body), **target.client_kwargs()):
            status, redriven = admin(dest, "POST", "/admin/dlq/redrive",
                                     {"topic": TOPIC, "group": GROUP, "message_ids": ids})
            assert status == 200 and sorted(redriven["redriven"]) == sorted(e["message_id"] for e in kept)
            wait_for(lambda: len(got) == 4, 10, "the re-driven dead letters on the target")
        assert got == {e["message_id"]: base64.b64decode(e["body"]) for e in kept}
        status, late = import_(dest, entries)
        assert status == 200 and late["imported"] == []
        assert {s["message_id"]: s["reason"] for s in late["skipped"]} == {
            **{e["message_id"]: "already_redriven" for e in kept}, gone["message_id"]: "already_deleted"}
    finally:
        target.teardown()
        shutil.rmtree(cluster.state / "target", ignore_errors=True)
