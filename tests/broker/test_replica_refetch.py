"""Issue 20, item 2: a follower whose leader refuses its fetch (`not_leader`: the leader has not seen the
placement or the topic yet) connects again and asks anew, instead of waiting on the refused link for good.
The leader here is a TCP server speaking the broker protocol that refuses the first fetch and serves the next."""

from __future__ import annotations

import asyncio

from broker_core import protocol as p
from broker_core.replication.follower import PartitionFollower
from broker_core.storage.memory_store import MemoryStore


class _Leader(asyncio.Protocol):
    """Refuses the first connection's fetch with not_leader, sends one batch to a later one."""

    fetches: list[int] = []
    stored: asyncio.Future

    def connection_made(self, transport) -> None:
        self.transport, self.proto = transport, p.Connection(p.SERVER)

    def data_received(self, data: bytes) -> None:
        self.proto.receive_data(data)
        while (event := self.proto.next_event()) is not p.NEED_DATA:
            if type(event) is p.ReplicaFetch:
                _Leader.fetches.append(event.from_seq)
                if len(_Leader.fetches) == 1:
                    self.transport.write(p.encode_frame(p.Error(None, p.E_NOT_LEADER, "not yet")))
                else:
                    batch = [event.from_seq, "app", 1, [[f"id{i}", b"body", {}] for i in range(3)], [[], [], []]]
                    self.transport.write(p.encode_frame(p.ReplicaRecords("orders", 0, [batch])))
            elif type(event) is p.ReplicaStored and not _Leader.stored.done():
                _Leader.stored.set_result(event.through_seq)


def test_a_refused_fetch_is_asked_again_on_a_new_connection():
    async def run():
        _Leader.fetches, _Leader.stored = [], asyncio.get_running_loop().create_future()
        server = await asyncio.get_running_loop().create_server(_Leader, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        store = MemoryStore(notify=lambda fn, *a: fn(*a))
        follower = PartitionFollower("orders", 0, store, "b1", lambda: ("127.0.0.1", port), "s3cret", 0.2)
        follower.start()
        try:
            through = await asyncio.wait_for(_Leader.stored, 20)
        finally:
            follower.stop()
            server.close()
        return through, store.next_seq

    through, next_seq = asyncio.run(run())
    assert _Leader.fetches[:2] == [1, 1], "refused once, then asked again from the same seq"
    assert (through, next_seq) == (3, 4), "the batch served on the second connection is stored"
