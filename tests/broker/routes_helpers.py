"""Two clusters in the tests' ZooKeeper (two chroots), a topic held by both, route documents written as the
control plane writes them (into every cluster holding the topic), and clients that keep sending and
receiving in the background while the route moves."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections import Counter

from broker_core.client import AsyncConsumer, AsyncProducer, Consumer, Producer
from broker_core.client._loop import LoopThread
from tests.broker.conftest import APP, STATE, Cluster


def make_cluster(zk_hosts: str, zk, name: str) -> Cluster:
    state = STATE / "tests" / name
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    return Cluster(zk_hosts, zk, name, state)


def hold_topic(cluster: Cluster, topic: str, groups: tuple[str, ...] = ("billing", "audit"), **topic_args) -> None:
    """The topic with the app's grant and bindings on `cluster`, as provisioning a cluster for a move does."""
    cluster.standard(topic)
    if topic_args:
        cluster.pv.topic(topic, **topic_args)
    for group in groups:
        cluster.pv.binding(topic, group, APP)


def route_document(topic: str, version: int, produce: Cluster, consume: list[Cluster],
                   environment: str = "dev") -> dict:
    named = {c.name: c.zk for c in [produce, *consume]}
    return {"topic": topic, "environment": environment, "version": version, "produce": produce.name,
            "consume": [c.name for c in consume], "clusters": named}


def write_route(holders: list[Cluster], doc: dict) -> None:
    """Write the route into every cluster holding the topic (the control plane's job)."""
    for cluster in holders:
        cluster.pv.route(doc["topic"], doc)


class Traffic:
    """A sync Producer and an AsyncProducer sending all the time, a sync Consumer (group `billing`) and an
    AsyncConsumer (group `audit`) receiving, all started once and never restarted. Records what each
    producer had acknowledged, what each consumer got (id, broker node), and every error a sender saw."""

    def __init__(self, topic: str, client_kwargs: dict):
        self.topic = topic
        self.kwargs = client_kwargs
        self.acked: list[str] = []
        self.errors: list[BaseException] = []
        self.got: dict[str, list[tuple[str, str]]] = {"billing": [], "audit": []}
        self.lock = threading.Lock()
        self.running = threading.Event()
        self.loop = LoopThread("test-async-clients")
        self.threads: list[threading.Thread] = []

    def _record(self, group: str):
        def handle(m):
            with self.lock:
                self.got[group].append((m.id, m.broker))
        return handle

    def start(self) -> Traffic:
        self.consumer = Consumer(self.topic, "billing", self._record("billing"), **self.kwargs).start()

        async def make():
            consumer = AsyncConsumer(self.topic, "audit", self._record("audit"), **self.kwargs)
            await consumer.start()
            return consumer, AsyncProducer(**self.kwargs)

        self.async_consumer, self.async_producer = self.loop.run(make(), 30)
        self.producer = Producer(**self.kwargs)
        self.running.set()
        self.threads = [threading.Thread(target=self._send_sync, daemon=True)]
        self.threads[0].start()
        self.async_task = self.loop.submit(self._send_async())
        return self

    def _send_sync(self) -> None:
        n = 0
        while self.running.is_set():
            n += 1
            try:
                message_id = self.producer.send(self.topic, f"sync {n}".encode())
            except Exception as exc:
                self.errors.append(exc)
                time.sleep(0.05)
                continue
            with self.lock:
                self.acked.append(message_id)
            time.sleep(0.002)

    async def _send_async(self) -> None:
        n = 0
        while self.running.is_set():
            burst = []
            for _ in range(5):
                n += 1
                try:
                    burst.append(self.async_producer.send(self.topic, f"async {n}".encode()))
                except Exception as exc:
                    self.errors.append(exc)
            for result in await asyncio.gather(*burst, return_exceptions=True):
                if isinstance(result, BaseException):
                    self.errors.append(result)
                else:
                    with self.lock:
                        self.acked.append(result)
            await asyncio.sleep(0.005)

    def async_brokers(self) -> list[str]:
        return self.loop.apply(self.async_consumer.connected_brokers)

    def routes(self) -> tuple[int | None, int | None]:
        """The route version each producer follows."""
        routes = self.producer.route(self.topic), self.loop.apply(self.async_producer.route, self.topic)
        return tuple(route.version if route else None for route in routes)

    def producer_clusters(self) -> tuple[set[str], set[str]]:
        """The clusters (connect strings) each producer holds a link to."""
        return set(self.producer.stats()), set(self.loop.apply(self.async_producer.stats))

    def settled_on(self, zk: str) -> bool:
        """Nothing queued for, nor awaiting an answer from, cluster `zk` in either producer."""
        for stats in (self.producer.stats().get(zk), self.loop.apply(self.async_producer.stats).get(zk)):
            if stats and (stats["queued"] or stats["in_flight_batches"] or stats["retrying_batches"]):
                return False
        return True

    def stop_sending(self) -> list[str]:
        self.running.clear()
        for thread in self.threads:
            thread.join(20)
        self.async_task.result(20)
        with self.lock:
            return list(self.acked)

    def missing(self, group: str, acked: list[str]) -> set[str]:
        with self.lock:
            return set(acked) - {i for i, _ in self.got[group]}

    def duplicates(self, group: str) -> int:
        with self.lock:
            return sum(n - 1 for n in Counter(i for i, _ in self.got[group]).values() if n > 1)

    def brokers_seen(self, group: str) -> set[str]:
        with self.lock:
            return {b for _, b in self.got[group]}

    def close(self) -> None:
        self.running.clear()
        for closing in (self.producer.close, self.consumer.stop):
            try:
                closing()
            except Exception:
                pass

        async def close_async():
            await self.async_producer.close()
            await self.async_consumer.stop()
        try:
            self.loop.run(close_async(), 20)
        finally:
            self.loop.stop()
