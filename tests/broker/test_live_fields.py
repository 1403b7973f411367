"""Every field of a topic or binding document the control plane changes applies to a running broker within
a deadline, without a restart: selector, mode, delivery limit, TTL, backoff and maximum in flight of a
binding; message types, maximum size, retention and storage level of a topic. One broker serves the whole
module (each test has topics of its own; its finished log segments go after 1 s idle); the broker's applied revision (`/stats`, `/admin/drain`) says
when a change has landed, and the test then checks its effect."""

from __future__ import annotations

import shutil
import uuid

import pytest

from broker_core import protocol as p
from broker_core.client import BrokerError, Consumer, Producer
from tests.broker.conftest import APP, SECRET, STATE, Cluster, wait_for
from tests.broker.helpers import RawConsumer, Received
from tests.broker.tx_helpers import TOKEN, drain

GROUP = "billing"
APPLIED_WITHIN_S = 1.0  # the deadline for a change to land on the running broker


@pytest.fixture(scope="module")
def live(zk_hosts, zk):
    name = f"live-fields-{uuid.uuid4().hex[:6]}"
    state = STATE / "tests" / name
    state.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(zk_hosts, zk, name, state)
    cluster.pv.meta()
    cluster.pv.app(APP, SECRET)
    cluster.broker("--segment-bytes", "2048", "--segment-idle-s", "1", admin_token=TOKEN)
    yield cluster
    cluster.teardown()
    shutil.rmtree(state, ignore_errors=True)


def topic(live, name: str, **fields) -> None:
    """A new topic the app may publish on, once the broker has it."""
    live.pv.topic(name, **fields)
    live.pv.grant(name, APP)
    wait_for(lambda: (lambda d: d["grants"] == [APP] and d["revision"] == 1)(drain(live.brokers[0], name)),
             APPLIED_WITHIN_S, f"topic {name}")


def bind(live, name: str, revision: int = 1, **fields) -> None:
    """Write a binding document of GROUP and wait until the broker applies its revision."""
    live.pv.binding(name, GROUP, APP, revision=revision, **fields)
    wait_for(lambda: drain(live.brokers[0], name)["groups"].get(GROUP, {}).get("bound") and
             live.brokers[0].group_stats(name, GROUP).get("revision") in (None, revision),
             APPLIED_WITHIN_S, f"binding revision {revision}")
    if revision > 1:
        wait_for(lambda: live.brokers[0].group_stats(name, GROUP).get("revision") == revision, APPLIED_WITHIN_S,
                 f"binding revision {revision}")


def retopic(live, name: str, revision: int, **fields) -> None:
    """Write a topic document and wait until the broker applies its revision."""
    live.pv.topic(name, revision=revision, **fields)
    wait_for(lambda: drain(live.brokers[0], name)["revision"] == revision, APPLIED_WITHIN_S,
             f"topic revision {revision}")


def consumer(live, name: str, got: Received, label: str = "c", **kw) -> Consumer:
    return Consumer(name, GROUP, got.handler(label, kw.pop("fail", None)), **live.client_kwargs(**kw))


# -- binding fields -----------------------------------------------------------------------------------

def test_selector(live):
    topic(live, "sel")
    bind(live, "sel", selector="a", selector_kind="exact")
    got = Received()
    with Producer(**live.client_kwargs()) as producer, consumer(live, "sel", got):
        a1 = producer.send("sel", b"1", message_type="a")
        producer.send("sel", b"2", message_type="b")
        wait_for(lambda: got.ids("c") == [a1], 5, "the first type")
        bind(live, "sel", 2, selector="b", selector_kind="exact")
        producer.send("sel", b"3", message_type="a")
        b2 = producer.send("sel", b"4", message_type="b")
        wait_for(lambda: got.ids("c") == [a1, b2], 5, "the newly selected type only")


def mode_and_consumers(live, name: str) -> tuple[str | None, int | None]:
    stats = live.brokers[0].group_stats(name, GROUP)
    return stats.get("mode"), stats.get("consumers")


def test_mode(live):
    topic(live, "mode")
    bind(live, "mode")
    got = Received()
    with Producer(**live.client_kwargs()) as producer, consumer(live, "mode", got, "one"), \
            consumer(live, "mode", got, "two"):
        first = producer.send("mode", b"to one of them")
        wait_for(lambda: got.count("one", "two") == 1, 5, "the clustering delivery")
        bind(live, "mode", 2, mode="broadcast")
        wait_for(lambda: mode_and_consumers(live, "mode") == ("broadcast", 2), 10, "both consumers back, in broadcast")
        second = producer.send("mode", b"to both")
        wait_for(lambda: second in got.ids("one") and second in got.ids("two"), 5, "the broadcast delivery")
    assert (got.ids("one") + got.ids("two")).count(first) == 1


def test_delivery_limit(live):
    topic(live, "limit")
    bind(live, "limit", delivery_limit=3, backoff_initial_ms=10, backoff_max_ms=10)
    got = Received()
    broker = live.brokers[0]
    with Producer(**live.client_kwargs()) as producer, consumer(live, "limit", got, fail=lambda m: True):
        before = producer.send("limit", b"three attempts")
        wait_for(lambda: broker.group_stats("limit", GROUP)["dead_letter_queue"] == 1, 5, "the first dead letter")
        bind(live, "limit", 2, delivery_limit=1, backoff_initial_ms=10, backoff_max_ms=10)
        after = producer.send("limit", b"one attempt")
        wait_for(lambda: broker.group_stats("limit", GROUP)["dead_letter_queue"] == 2, 5, "the second dead letter")
    attempts = {}
    for message_id in got.ids("c"):
        attempts[message_id] = attempts.get(message_id, 0) + 1
    assert attempts == {before: 3, after: 1}


def test_ttl(live):
    topic(live, "ttl")
    bind(live, "ttl")
    broker = live.brokers[0]
    with Producer(**live.client_kwargs()) as producer:
        producer.send("ttl", b"waits for a consumer")
    wait_for(lambda: broker.group_stats("ttl", GROUP).get("depth") == 1, 5, "the message to wait")
    bind(live, "ttl", 2, ttl_s=1)
    wait_for(lambda: broker.group_stats("ttl", GROUP)["expired"] == 1, 5, "the message to expire")
    assert broker.group_stats("ttl", GROUP)["dead_letter_queue"] == 1


def test_backoff(live):
    topic(live, "backoff")
    bind(live, "backoff", backoff_initial_ms=60_000, backoff_max_ms=60_000)
    got = Received()
    seen = []
    with Producer(**live.client_kwargs()) as producer, \
            consumer(live, "backoff", got, fail=lambda m: seen.append((m.id, m.attempt)) or m.attempt == 1):
        slow = producer.send("backoff", b"nacked under a minute of backoff")
        wait_for(lambda: (slow, 1) in seen, 5, "the first attempt")
        bind(live, "backoff", 2, backoff_initial_ms=10, backoff_max_ms=10)
        fast = producer.send("backoff", b"nacked under 10 ms of backoff")
        wait_for(lambda: (fast, 2) in seen, 5, "the retry after the new backoff")
    assert (slow, 2) not in seen, "a retry scheduled before the change keeps its time"


def test_max_in_flight(live):
    topic(live, "inflight")
    bind(live, "inflight", max_in_flight=1)
    broker = live.brokers[0]
    raw = RawConsumer(broker.address, APP, SECRET, "inflight", GROUP, credit=100)
    raw.start()
    try:
        with Producer(**live.client_kwargs()) as producer:
            producer.send_many("inflight", [b"%d" % i for i in range(5)])
        wait_for(lambda: broker.group_stats("inflight", GROUP).get("depth") == 4, 5, "the backlog behind the cap")
        assert len(raw.deliveries) == 1
        bind(live, "inflight", 2, max_in_flight=5)
        wait_for(lambda: len(raw.deliveries) == 5, 5, "the raised cap to apply to the connected consumer")
    finally:
        raw.close()


# -- topic fields -------------------------------------------------------------------------------------

def refusal(producer, name: str, body: bytes, **kw) -> str | None:
    try:
        producer.send(name, body, **kw)
        return None
    except BrokerError as exc:
        return exc.code


def test_message_types(live):
    topic(live, "types", message_types=["a"])
    with Producer(**live.client_kwargs(send_timeout=5)) as producer:
        assert refusal(producer, "types", b"x", message_type="b") == p.E_INVALID
        retopic(live, "types", 2, message_types=["a", "b"])
        assert refusal(producer, "types", b"x", message_type="b") is None
        retopic(live, "types", 3, message_types=["b"])
        assert refusal(producer, "types", b"x", message_type="a") == p.E_INVALID


def test_max_message_bytes_and_tx_check(live):
    topic(live, "size", max_message_bytes=100)
    with Producer(**live.client_kwargs(send_timeout=5)) as producer:
        assert refusal(producer, "size", b"x" * 200) == p.E_INVALID
        # tx_check: the broker takes the document's new revision; the control plane's sweep uses its timing
        retopic(live, "size", 2, max_message_bytes=1000, tx_check={"delay_s": 1, "interval_s": 1, "max_checks": 2})
        assert refusal(producer, "size", b"x" * 200) is None


def test_retention_drops_old_messages_and_their_segments(live):
    topic(live, "ret", storage="file")
    bind(live, "ret")
    broker = live.brokers[0]
    folder = broker.data_dir / "topics" / "ret" / "p0"  # partition 0 (issue 20)
    with Producer(**live.client_kwargs()) as producer:
        for batch in range(3):  # 2 KiB segments: a segment per batch
            producer.send_many("ret", [b"%d:" % i + b"." * 300 for i in range(batch * 10, batch * 10 + 10)])
    assert len(list(folder.glob("*.log"))) == 3
    retopic(live, "ret", 2, storage="file", retention_s=1)
    wait_for(lambda: broker.group_stats("ret", GROUP)["retention_dropped"] == 30, 5, "the old messages to go")
    wait_for(lambda: not any(folder.glob("*.log")), 5, "every segment to be deleted (the last one once idle)")
    assert drain(broker, "ret")["messages"] == 0 and broker.group_stats("ret", GROUP)["dead_letter_queue"] == 0


def test_storage_level(live):
    topic(live, "level", storage="file")
    bind(live, "level")
    broker = live.brokers[0]
    folder = broker.data_dir / "topics" / "level"
    got = Received()

    def store() -> tuple[str, str | None]:
        stats = broker.stats()["topics"]["level"]
        return stats["store"]["storage"], stats["storage_wanted"]

    with Producer(**live.client_kwargs()) as producer:
        with consumer(live, "level", got):
            first = producer.send("level", b"on file")
            wait_for(lambda: got.ids("c") == [first] and drain(broker, "level")["messages"] == 0, 5, "the ack")
        assert folder.is_dir()
        retopic(live, "level", 2, storage="memory")
        wait_for(lambda: store() == ("memory", None) and not folder.exists(), 2, "the memory level")

        backlog = producer.send_many("level", [b"in memory 1", b"in memory 2"])
        retopic(live, "level", 3, storage="file")
        assert store() == ("memory", "file"), "not converted while it holds messages"
        with consumer(live, "level", got):
            wait_for(lambda: store() == ("file", None), 5, "the file level once drained")
        assert got.ids("c") == [first, *backlog]
        producer.send("level", b"on file again")
    assert any(folder.glob("p0/*.log"))  # partition 0 (issue 20)
