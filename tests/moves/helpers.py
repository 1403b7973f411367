"""Helpers of the topic-move tests: waiting on a move, reading what a broker cluster holds of a topic, and a
producer that keeps sending from a thread."""

from __future__ import annotations

import json
import threading
import time

from kazoo.exceptions import NoNodeError

from broker_core.client import Producer
from broker_core.layout import LAYOUT
from devstack.waiting import wait_for


def describe(move_id: int) -> str:
    from apps.moves.models import TopicMove

    move = TopicMove.objects.get(pk=move_id)
    lines = [f"move #{move.pk} {move.state} at {move.step}: {move.error}"]
    lines += [f"  {s.name} {s.state} attempts={s.attempts} {s.summary} {s.error[:300]}" for s in move.steps.all()]
    return "\n".join(lines)


def wait_state(move, state: str, timeout: float = 90):
    from apps.moves.models import TopicMove

    try:
        return wait_for(lambda: TopicMove.objects.filter(pk=move.pk, state=state).first(), timeout,
                        f"move #{move.pk} to be {state}", interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe(move.pk)}") from None


def wait_step(move, step: str, timeout: float = 60):
    from apps.moves.models import TopicMove

    try:
        return wait_for(lambda: TopicMove.objects.filter(pk=move.pk, step=step).first(), timeout,
                        f"move #{move.pk} to reach {step}", interval=0.02)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe(move.pk)}") from None


def route_node(broker_cluster, topic: str) -> dict | None:
    try:
        data, _ = broker_cluster.zk_client.get(broker_cluster.chroot + LAYOUT.route(topic))
    except NoNodeError:
        return None
    return json.loads(data)


def topic_nodes(broker_cluster, topic: str) -> list[str]:
    """The topic's nodes in the cluster's ZooKeeper: topic, route, bindings, grants."""
    zk, root = broker_cluster.zk_client, broker_cluster.chroot
    found = [p for p in (LAYOUT.topic(topic), LAYOUT.route(topic)) if zk.exists(root + p)]
    for parent in (LAYOUT.topic_bindings(topic), LAYOUT.topic_grants(topic)):
        try:
            found += [f"{parent}/{child}" for child in zk.get_children(root + parent)]
        except NoNodeError:
            pass
    return found


def drain(broker, topic: str) -> dict:
    return json.loads(broker.http(f"/admin/drain?topic={topic}"))


def held_by(broker_cluster, topic: str) -> list[str]:
    return [b.node_id for b in broker_cluster.brokers if drain(b, topic)["held"]]


class SteadyProducer:
    """Sends `rate` messages a second from a thread (each send waits for its acknowledgement); keeps the ids
    acknowledged, the errors, and the longest time one send took."""

    def __init__(self, topic: str, rate: float, **client):
        self.topic, self.rate = topic, rate
        self.producer = Producer(**client)
        self.acked: list[str] = []
        self.errors: list[str] = []
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        start, n = time.monotonic(), 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.acked.append(self.producer.send(self.topic, b"steady-%d" % n, message_type="paid"))
            except Exception as exc:  # counted: the test says there must be none
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.longest = max(self.longest, time.monotonic() - t0)
            n += 1
            pause = start + n / self.rate - time.monotonic()
            if pause > 0:
                self._stop.wait(pause)

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=30)
            self.producer.close()
