"""kill -9 of the broker in the middle of a stream: no acknowledged message is lost.

A producer sends 20,000 messages; once a random number of them has been acknowledged, the broker
is killed with SIGKILL and started again. The producer fails over (here: waits for the same broker
to come back) and sends again what was not acknowledged. Afterwards every acknowledged message must
be delivered; duplicates (stored twice after a resend, or delivered again after the restart) are
counted and reported, not hidden.

SIGKILL ends the process but keeps the OS page cache, so this proves written-before-ack, not
fsync-before-ack; the fsync tests of tests/broker/test_file_store.py prove the latter.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
from collections import Counter

from broker_core.client import AsyncProducer, Consumer, SwitchyardError
from tests.broker.conftest import APP, REPORTS, wait_for
from tests.broker.helpers import Received

TOTAL = 20_000


def test_kill_9_mid_stream_loses_no_acknowledged_message(cluster):
    seed = int(os.environ.get("CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    kill_after = rng.randrange(TOTAL // 10, TOTAL * 3 // 4)
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()

    acknowledged: set[str] = set()
    failures: list[BaseException] = []
    restarted = threading.Event()
    kill_times: dict[str, float] = {}

    def kill_and_restart() -> None:
        kill_times["killed"] = time.monotonic()
        broker.kill(signal.SIGKILL)
        broker.start()
        kill_times["restarted"] = time.monotonic()
        restarted.set()

    async def produce() -> None:
        loop = asyncio.get_running_loop()
        producer = AsyncProducer(**cluster.client_kwargs(send_timeout=60))
        window = asyncio.Semaphore(2000)
        killer: list = []

        async def one(i: int) -> None:
            async with window:
                try:
                    acknowledged.add(await producer.send("orders", f"message {i}".encode().ljust(1024, b".")))
                except SwitchyardError as exc:
                    failures.append(exc)
                if len(acknowledged) >= kill_after and not killer:
                    killer.append(loop.run_in_executor(None, kill_and_restart))

        await asyncio.gather(*(one(i) for i in range(TOTAL)))
        await killer[0]
        await producer.close()

    asyncio.run(produce())
    assert restarted.is_set(), "the broker was killed during the stream"
    assert not failures, f"sends failed: {failures[:3]}"

    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs(credit=2000)):
        wait_for(lambda: acknowledged <= set(got.ids("c")), 60, "every acknowledged message")
        last = -1
        while got.count("c") != last:  # let any further duplicates arrive before counting
            last = got.count("c")
            time.sleep(0.5)
    received = got.ids("c")
    counts = Counter(received)
    lost = acknowledged - set(received)
    duplicates = sum(n - 1 for n in counts.values())
    stored = broker.stats()["topics"]["orders"]["published"]
    REPORTS.append(
        f"crash test (seed {seed}): sent {TOTAL}, acknowledged {len(acknowledged)}, broker killed after "
        f"{kill_after} acks and back in {kill_times['restarted'] - kill_times['killed']:.2f}s; "
        f"delivered {len(received)} ({len(counts)} distinct), duplicates {duplicates}, lost {len(lost)}; "
        f"stored by the restarted broker {stored}")
    print(REPORTS[-1])
    assert not lost, f"{len(lost)} acknowledged messages were lost (seed {seed})"
    assert len(acknowledged) == TOTAL
