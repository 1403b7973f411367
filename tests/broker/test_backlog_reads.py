"""A placed topic's backlog read back from several partitions at once (delivery/backlog.py `PartitionedBacklog`),
on its own: real file stores, the loop's callbacks run one at a time.

CI on 5aec534 saw an ordered rescale deliver a moved key's first message under the new mapping before the last
ones of its old partition (`test_ordered_rescale`: "index 500 handled when 479 was next"). A read of two
partitions' backlogs came back one partition at a time, and the first one's position had moved past what it read
while those messages waited, outside the group, for the second. In that gap the group owed them nowhere: the drain
barrier (`OrderedGroup.owes_below`) said the old partition was finished, and a new message of the partition was
taken into memory ahead of them.
"""

from __future__ import annotations

from broker_core.delivery.ordered import OrderedGroup
from broker_core.protocol import message
from broker_core.storage.file_store import FileStore
from broker_core.storage.memory_store import MemoryStore
from broker_core.storage.partitions import PartitionedStore, partition_base, partition_of
from broker_core.tracing.sink import NullTraceSink
from tests.broker.test_file_store import Loop, executor  # noqa: F401 (a fixture)

GROUP = "billing"
WINDOW = 16  # messages the group holds in memory: the rest of its backlog stays in the logs
PER_PARTITION = 6  # a read of both partitions (half the window each) takes all of each one
KEYS = {0: "a", 1: "b"}  # partition -> the key of its messages


def stored(store: FileStore, loop: Loop, first: int, count: int, key: str) -> list:
    """`count` messages appended to one partition's store and durable (as a publish hands them to the groups)."""
    arrays = [message(f"{key}-{i}", "t", f"{key}:{i}".encode(), key=key) for i in range(first, first + count)]
    done: list = []
    messages = store.append("app", 1, arrays, [(GROUP,)] * count, done.append)
    loop.run(lambda: len(done) == 1)
    assert done == [None]
    return messages


def test_a_read_of_two_partitions_counts_as_on_disk_until_both_reach_the_group(tmp_path, executor):  # noqa: F811
    loop = Loop()
    stores = {}
    for pid in KEYS:
        stores[pid] = FileStore(tmp_path / f"p{pid}", executor=executor, notify=loop.notify,
                                first_seq=partition_base(pid))
        stores[pid].recover()
    topic = PartitionedStore(tmp_path, stores, durable=True, spare=MemoryStore(notify=loop.notify))
    group = OrderedGroup("orders", GROUP, topic, None, trace=NullTraceSink(), max_credit=100,
                         window=(WINDOW, 1 << 24))
    for pid, key in KEYS.items():  # owed, left in the log (as past a full window)
        group.backlog.spill(stored(stores[pid], loop, 0, PER_PARTITION, key))
    ends = {pid: store.next_seq for pid, store in stores.items()}
    assert group.backlog.on_disk and all(group.owes_below(pid, ends[pid]) for pid in stores)

    group.dispatch()  # the group reads both partitions' backlogs at once, each in the store's executor
    assert group.backlog.reading
    answers = [loop.q.get(timeout=10) for _ in stores]  # each partition's read answered (run on the loop thread)

    fn, args = answers[0]
    fn(*args)  # the first partition's answer
    assert group.backlog.reading, "the read ends with the second answer"
    for pid in stores:  # what it read is owed: on disk until the whole read is in the group
        assert group.owes_below(pid, ends[pid]), \
            f"between the two answers partition {pid} looks finished while its messages read are held nowhere"
    for pid, key in KEYS.items():  # a message of each partition stored now, behind what was read
        group.enqueue(stored(stores[pid], loop, PER_PARTITION, 1, key))
    assert not any(m.seq >= ends[partition_of(m.seq)] for m in group.main.ready), \
        "a message stored after the read went to memory ahead of the messages read before it"

    fn, args = answers[1]
    fn(*args)
    assert not group.backlog.reading
    ready = [m.seq for m in group.main.ready]
    for pid in stores:
        seqs = [seq for seq in ready if partition_of(seq) == pid]
        assert seqs and seqs == sorted(seqs), f"partition {pid}: {seqs}"
        assert all(seq < ends[pid] for seq in seqs), f"partition {pid}: later messages came before the read ones"
        assert group.owes_below(pid, ends[pid])
    assert group.backlog.on_disk, "the rest of the backlog and the later messages stay on disk, to be read in turn"
    for store in stores.values():
        store.close()
