"""Transaction messages with real broker processes and a real ZooKeeper: prepare, commit, rollback,
kill -9 of the broker, a killed producer whose successor answers the back-check, and the admin API
(auth, bad input)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from broker_core.client import BrokerError, Consumer, Producer
from tests.broker.conftest import APP, ROOT, wait_for
from tests.broker.helpers import Received
from tests.broker.tx_helpers import TOKEN, admin, resolve, states

TOPIC = "orders"


def setup_tx(cluster, *broker_args: str, brokers: int = 1):
    cluster.standard(TOPIC)
    cluster.pv.topic(TOPIC, transactional=True, tx_check={"delay_s": 1})
    cluster.pv.binding(TOPIC, "billing", APP)
    return [cluster.broker(*broker_args, admin_token=TOKEN) for _ in range(brokers)]


def settled(got: Received, producer: Producer, name: str = "c") -> list[str]:
    """Publish a plain marker message and wait for it: whatever was deliverable before it has arrived."""
    marker = producer.send(TOPIC, b"marker", message_type="marker")
    wait_for(lambda: marker in got.ids(name), 20, "the marker message")
    return [i for i in got.ids(name) if i != marker]


def test_local_transaction_returns_then_delivered_once(cluster):
    (broker,) = setup_tx(cluster)
    got = Received()
    with Producer(**cluster.client_kwargs()) as producer, Consumer(TOPIC, "billing", got.handler("c"),
                                                                    **cluster.client_kwargs()):
        ran = []
        result = producer.send_transactional(TOPIC, b"order 1", ran.append, message_type="order.created")
        assert ran == [result.message_id]  # the local transaction ran with the id, before the commit
        assert result.state == "committed"
        wait_for(lambda: result.message_id in got.ids("c"), 20, "the committed message")
        assert settled(got, producer).count(result.message_id) == 1
    assert states(broker, [result.message_id]) == {result.message_id: "committed"}


def test_local_transaction_raises_then_rolled_back_never_delivered(cluster):
    (broker,) = setup_tx(cluster)
    got = Received()
    seen: list[str] = []

    def fail(message_id: str) -> None:
        seen.append(message_id)
        raise ValueError("local transaction failed")

    with Producer(**cluster.client_kwargs()) as producer, Consumer(TOPIC, "billing", got.handler("c"),
                                                                    **cluster.client_kwargs()):
        with pytest.raises(ValueError, match="local transaction failed"):
            producer.send_transactional(TOPIC, b"order 2", fail, message_type="order.created")
        assert len(seen) == 1
        assert states(broker, seen) == {seen[0]: "rolled_back"}
        assert seen[0] not in settled(got, producer)
        time.sleep(0.5)
        assert seen[0] not in got.ids("c")


def test_prepared_on_a_non_transactional_topic_is_refused(cluster):
    cluster.standard("plain")
    cluster.broker(admin_token=TOKEN)
    with Producer(**cluster.client_kwargs()) as producer:
        with pytest.raises(BrokerError) as refused:
            producer.send_transactional("plain", b"x", lambda _id: None)
    assert refused.value.code == "invalid" and "not transactional" in refused.value.message


def test_prepared_survives_kill_9_undelivered_then_resolve(cluster):
    (broker,) = setup_tx(cluster)
    with Producer(**cluster.client_kwargs()) as producer:
        prepared = [producer.prepare(TOPIC, b"tx %d" % i, message_type="order.created") for i in range(3)]
    ids = [pm.message_id for pm in prepared]
    broker.restart()  # SIGKILL, then start again on the same data

    assert states(broker, ids) == dict.fromkeys(ids, "prepared")
    status, listed = admin(broker, "GET", "/admin/tx/prepared?older_than_ms=0")
    assert status == 200 and [p["message_id"] for p in listed["prepared"]] == ids
    assert all(p["topic"] == TOPIC and p["app_id"] == APP and not p["producer_connected"] for p in listed["prepared"])

    got = Received()
    with Producer(**cluster.client_kwargs()) as producer, Consumer(TOPIC, "billing", got.handler("c"),
                                                                    **cluster.client_kwargs()):
        assert not set(ids) & set(settled(got, producer)), "prepared messages are never delivered"
        first = resolve(broker, [(ids[0], "commit"), (ids[1], "rollback")], reason="check")
        assert [(r["state"], r["changed"], r["error"]) for r in first] == [
            ("committed", True, None), ("rolled_back", True, None)]
        wait_for(lambda: ids[0] in got.ids("c"), 20, "the committed message")
        again = resolve(broker, [(ids[0], "commit"), (ids[1], "rollback"), (ids[0], "rollback"),
                                 ("no-such-id", "commit")])
        assert [(r["state"], r["changed"], r["error"]) for r in again] == [
            ("committed", False, None), ("rolled_back", False, None), ("committed", False, "already_resolved"),
            (None, False, "unknown_message")]
        delivered = settled(got, producer)
        assert delivered.count(ids[0]) == 1 and ids[1] not in delivered and ids[2] not in delivered
    # the decisions are durable: after another kill -9 they hold, and nothing is delivered again
    broker.restart()
    assert states(broker, ids) == {ids[0]: "committed", ids[1]: "rolled_back", ids[2]: "prepared"}


def run_proc(*args: str, cache) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.broker.tx_producer_proc", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "SY_TEST_CACHE": str(cache)})


def test_killed_producer_new_producer_answers_the_check(cluster, tmp_path):
    brokers = setup_tx(cluster, brokers=2)
    dead = run_proc("prepare", cluster.zk, TOPIC, "4", cache=cluster.cache_dir)
    out, err = dead.communicate(timeout=60)
    ids = out.split()
    assert dead.returncode == 0 and len(ids) == 4, err
    owner = {}
    for b in brokers:  # which broker holds which (the dead producer used one of them)
        for message_id, state in states(b, ids).items():
            if state == "prepared":
                owner[message_id] = b
    assert set(owner) == set(ids)
    broker = owner[ids[0]]
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({ids[0]: "commit", ids[1]: "rollback", ids[2]: "unknown"}))

    status, answer = admin(broker, "POST", "/admin/tx/check", {"message_ids": ids[:1], "timeout_ms": 1000})
    assert status == 200 and answer["results"][0]["reason"] == "no_listener" and answer["results"][0]["answer"] is None

    listener = run_proc("listen", cluster.zk, TOPIC, str(answers), cache=cluster.cache_dir)
    try:
        assert listener.stdout.readline().strip() == "ready", listener.stderr.read() if listener.poll() else ""
        status, listed = admin(broker, "GET", "/admin/tx/prepared")
        assert all(p["producer_connected"] for p in listed["prepared"])
        held = [i for i in ids if owner[i] is broker]
        status, answer = admin(broker, "POST", "/admin/tx/check", {"message_ids": held, "timeout_ms": 5000})
        assert status == 200
        by_id = {r["message_id"]: r for r in answer["results"]}
        expected = {ids[0]: "commit", ids[1]: "rollback", ids[2]: "unknown", ids[3]: "unknown"}
        for message_id in held:
            r = by_id[message_id]
            assert (r["answer"], r["via"], r["reason"], r["state"]) == (expected[message_id], "connection", None,
                                                                        "prepared")
            assert r["connection"]
        assert states(broker, held) == dict.fromkeys(held, "prepared"), "checking changes nothing"

        got = Received()
        with Producer(**cluster.client_kwargs()) as producer, Consumer(TOPIC, "billing", got.handler("c"),
                                                                        **cluster.client_kwargs()):
            decisions = [(i, expected[i]) for i in held if expected[i] != "unknown"]
            resolve(broker, decisions, reason="check")
            if ids[0] in held:
                wait_for(lambda: ids[0] in got.ids("c"), 20, "the message the new producer committed")
            delivered = settled(got, producer)
            assert delivered.count(ids[0]) == (1 if ids[0] in held else 0)
            assert ids[1] not in delivered and ids[2] not in delivered
    finally:
        listener.kill()
        listener.wait(10)


def test_check_listener_reaches_every_broker_in_process(cluster):
    brokers = setup_tx(cluster, brokers=2)
    asked: list[str] = []
    lock = threading.Lock()

    def listener(check):
        with lock:
            asked.append(check.message_id)
        return "rollback"

    with Producer(**cluster.client_kwargs()) as plain:
        prepared = plain.prepare(TOPIC, b"x", message_type="order.created")
    holder = next(b for b in brokers if states(b, [prepared.message_id])[prepared.message_id] == "prepared")
    with Producer(**cluster.client_kwargs(check_listener=listener)) as producer:
        producer.connect(TOPIC, timeout=20)
        status, answer = admin(holder, "POST", "/admin/tx/check", {"message_ids": [prepared.message_id]})
    assert status == 200 and answer["results"][0]["answer"] == "rollback" and asked == [prepared.message_id]


# -- the admin API's guards ---------------------------------------------------------------------------

def test_admin_auth(cluster):
    (broker,) = setup_tx(cluster)
    no_token = cluster.broker(admin_token="")  # no token (the test environment may export one)
    status, answer = admin(no_token, "GET", "/admin/tx/prepared")
    assert status == 403 and answer["error"] == "admin_disabled"
    for token in (None, "wrong-token"):
        status, answer = admin(broker, "GET", "/admin/tx/prepared", token=token)
        assert status == 401 and answer["error"] == "unauthorized"
    status, answer = admin(broker, "POST", "/admin/tx/resolve", {"decisions": []}, token="wrong")
    assert status == 401
    assert admin(broker, "GET", "/admin/no-such-thing")[0] == 404


def test_bad_admin_input_is_400_and_changes_nothing(cluster):
    (broker,) = setup_tx(cluster)
    with Producer(**cluster.client_kwargs()) as producer:
        ids = [producer.prepare(TOPIC, b"x", message_type="order.created").message_id for _ in range(2)]
    bad_calls = [
        ("POST", "/admin/tx/resolve", {"decisions": [{"message_id": ids[0], "decision": "commit"},
                                                     {"message_id": ids[1], "decision": "maybe"}]}),
        ("POST", "/admin/tx/resolve", {"decisions": [{"message_id": ids[0], "decision": "commit", "reason": 7}]}),
        ("POST", "/admin/tx/resolve", {"decisions": "all"}),
        ("POST", "/admin/tx/resolve", [ids[0]]),
        ("POST", "/admin/tx/check", {"message_ids": ids, "timeout_ms": 60_000}),
        ("POST", "/admin/tx/check", {"message_ids": [1, 2]}),
        ("POST", "/admin/tx/check", {"message_ids": ["x"] * 1001}),
        ("GET", "/admin/tx/prepared?limit=0", None),
        ("GET", "/admin/tx/prepared?limit=10001", None),
        ("GET", "/admin/tx/prepared?older_than_ms=soon", None),
        ("GET", "/admin/tx/prepared?after=garbage", None),
        ("GET", "/admin/tx/state", None),
        ("GET", "/admin/dlq?topic=orders", None),
        ("POST", "/admin/dlq/redrive", {"topic": TOPIC, "group": "billing", "message_ids": []}),
    ]
    for method, path, body in bad_calls:
        status, answer = admin(broker, method, path, body)
        assert status == 400 and answer["error"] and answer["message"], (path, body, answer)
    status, answer = admin(broker, "POST", "/admin/tx/resolve", raw=b"{not json")
    assert status == 400
    status, answer = admin(broker, "POST", "/admin/tx/resolve", raw=b" " * (1024 * 1024 + 1))
    assert status == 413 and answer["error"] == "too_large"
    assert states(broker, ids) == dict.fromkeys(ids, "prepared")
    # and a good call after all that still works
    assert [r["state"] for r in resolve(broker, [(ids[0], "commit")])] == ["committed"]


def test_prepared_listing_pages_in_order(cluster):
    (broker,) = setup_tx(cluster)
    with Producer(**cluster.client_kwargs()) as producer:
        ids = []
        for _ in range(5):
            ids.append(producer.prepare(TOPIC, b"x", message_type="order.created").message_id)
            time.sleep(0.005)
    seen, after = [], None
    while True:
        path = "/admin/tx/prepared?limit=2" + (f"&after={after}" if after else "")
        status, page = admin(broker, "GET", path)
        assert status == 200 and len(page["prepared"]) <= 2
        seen += [p["message_id"] for p in page["prepared"]]
        after = page["next_after"]
        if not after:
            break
    assert seen == ids
    status, page = admin(broker, "GET", "/admin/tx/prepared?older_than_ms=3600000")
    assert page["prepared"] == [] and page["node_id"] == broker.node_id


def test_async_producer_with_async_local_transaction_and_listener(cluster):
    import asyncio

    from broker_core.client import AsyncProducer

    (broker,) = setup_tx(cluster)

    async def listener(check):
        return "commit" if check.business_id == "keep" else "rollback"

    async def go():
        async with AsyncProducer(**cluster.client_kwargs(check_listener=listener)) as producer:
            await producer.connect(TOPIC, timeout=20)

            async def local(message_id):
                await asyncio.sleep(0.01)

            done = await producer.send_transactional(TOPIC, b"a", local, message_type="order.created")
            with pytest.raises(KeyError):
                await producer.send_transactional(TOPIC, b"b", lambda _id: {}["missing"])
            stale = [await producer.prepare(TOPIC, b"c", business_id=b) for b in ("keep", "drop")]
            loop = asyncio.get_running_loop()
            status, answer = await loop.run_in_executor(None, lambda: admin(
                broker, "POST", "/admin/tx/check", {"message_ids": [s.message_id for s in stale]}))
            return done, stale, status, answer

    done, stale, status, answer = asyncio.run(go())
    assert done.state == "committed" and states(broker, [done.message_id])[done.message_id] == "committed"
    assert status == 200 and [r["answer"] for r in answer["results"]] == ["commit", "rollback"]
    assert states(broker, [s.message_id for s in stale]) == {s.message_id: "prepared" for s in stale}


def test_a_producer_keeps_its_connections_across_many_transactions(cluster):
    """Each prepare asks the producer to be connected; a connected producer must not open (and leak) another
    connection every time. The broker counts the connections it holds."""
    (broker,) = setup_tx(cluster)
    with Producer(**cluster.client_kwargs(check_listener=lambda check: "commit")) as producer:
        producer.send_transactional(TOPIC, b"first", lambda message_id: None, message_type="order.created")
        before = broker.stats()["connections"]
        for _ in range(20):
            producer.send_transactional(TOPIC, b"next", lambda message_id: None, message_type="order.created")
            producer.prepare(TOPIC, b"left open", message_type="order.created")
        assert broker.stats()["connections"] == before
    wait_for(lambda: broker.stats()["connections"] == 0, 10, "the producer's connections to close")
