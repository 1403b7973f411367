"""Leader election for replicated partitions (issue 20, item 2), through `/partition-state/<topic>/<p>`.

The control plane creates each replicated partition's state with its placement (no leader yet: epoch 0). The
brokers then write it only by compare-and-set on the node's version, so of two brokers deciding at once one
wins and the other reads the winner's state:

- epoch 0: the first replica of the placement that is registered in `/brokers` takes it (epoch 1, ISR itself);
  the others wait up to `PREFERRED_WAIT_S` from when they first see it for the first (preferred) one, so brokers
  started one after another keep the leaders spread as the placement spread them;
- the leader's ephemeral `/brokers/<node>` is gone (stopped, or its session expired: `--zk-session-timeout-s`
  after a kill), or a rebalance took it off the partition's replicas: a replica of the ISR takes over with the next epoch (ISR itself; the others join once caught
  up). A replica outside the ISR never does: it may lack acknowledged messages;
- a broker that restarts and finds itself the leader while another ISR replica is registered hands the
  partition to that replica (its own disk may have been lost); with none registered it leads on.

Each write names the epoch; a leader whose compare-and-set is refused, that sees a newer epoch, or whose follower
fetches at a newer epoch steps down and never acknowledges again (leader.py). This module does the decision
(`decide`, no I/O) and the writes (`StateWriter`, kazoo async, results handed to the event loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.exceptions import KazooException

from broker_core.layout import LAYOUT, encode, partition_state

log = logging.getLogger("broker_core.replication")


PREFERRED_WAIT_S = 5.0  # how long the other replicas of a new partition wait for its preferred (first) one


def decide(me: str, replicas: tuple[str, ...], state: dict, alive, fresh: bool, next_seq: int,
           patient: bool = False) -> dict | None:
    """The partition state this broker should write now (None: nothing). `alive`: the registered brokers;
    `fresh`: this broker process has neither led nor followed the partition yet; `patient`: this broker saw the
    partition unelected for less than PREFERRED_WAIT_S (it leaves it to the preferred replica meanwhile)."""
    epoch, leader, isr = state["leader_epoch"], state["leader"], state["isr"]
    if epoch == 0:
        if patient and replicas[0] != me and replicas[0] not in alive:
            return None  # brokers starting one after another: the placement spread the leaders, keep them spread
        first = next((r for r in replicas if r == me or r in alive), None)
        return partition_state(me, 1, [me], next_seq) if first == me else None
    if leader == me:
        peers = [r for r in isr if r != me and r in alive and r in replicas]
        if fresh and peers:  # restarted while a replica that holds everything acknowledged is up: it leads
            return partition_state(peers[0], epoch + 1, [peers[0]], 0)
        return None
    if (leader not in alive or leader not in replicas) and me in isr and me in replicas:
        return partition_state(me, epoch + 1, [me], next_seq)  # (a leader moved off the partition, too)
    return None


class StateWriter:
    """Compare-and-set writes of partition states; `done(version or None)` runs on the loop."""

    def __init__(self, client, root: str, notify: Callable[..., object]):
        self.client = client
        self.root = root.rstrip("/")
        self.notify = notify

    def write(self, topic: str, partition: int, doc: dict, version: int, done: Callable[[int | None], None]) -> None:
        path = self.root + LAYOUT.partition_state(topic, partition)
        try:
            result = self.client.set_async(path, encode(doc), version)
        except KazooException as exc:
            log.warning("%s: not written (%s)", path, exc)
            self.notify(done, None)
            return

        def finished(res) -> None:
            try:
                stat = res.get_nowait()
            except Exception as exc:  # BadVersion (another broker wrote first), connection loss, ...
                log.info("%s: compare-and-set at version %d refused: %r", path, version, exc)
                self.notify(done, None)
            else:
                self.notify(done, stat.version)

        result.rawlink(finished)
