"""Issue 20, item 2: the control plane creates each replicated partition's `/partition-state/<topic>/<p>` with
its placement (no leader elected yet, with the layout's ACL), never overwrites what the brokers' elections wrote
there, and creates one that is missing beside a placement that stands. Real ZooKeeper, the control plane's
own session and writer (`apps/provisioning/partitions.py`)."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

from apps.provisioning import partitions
from apps.provisioning.zk import Session
from broker_core.cluster.zk_acl import _canonical
from broker_core.layout import LAYOUT, encode


def test_partition_states_are_created_with_the_placement_and_then_left_to_the_brokers(zk_connect, zk):
    chroot = f"/sy-test-pstate/{uuid.uuid4().hex[:8]}"
    session = Session(zk_connect, chroot)
    session.ensure_skeleton()
    try:
        for node in ("b1", "b2", "b3"):
            zk.create(chroot + LAYOUT.broker(node), encode({"host": "127.0.0.1", "port": 1}), ephemeral=True)
        topic = SimpleNamespace(name="orders", partition_count=2, replicas=2, ordered=False)
        doc = partitions.write(session, topic)
        paths = [chroot + LAYOUT.partition_state("orders", pid) for pid in (0, 1)]
        for part, path in zip(doc["partitions"], paths, strict=True):
            data, _ = zk.get(path)
            assert json.loads(data) == {"leader": part["replicas"][0], "leader_epoch": 0, "isr": part["replicas"]}
            acl, _ = zk.get_acls(path)
            assert _canonical(acl) == _canonical(session.policy.for_path(LAYOUT.partition_state("orders", 0)))

        elected = {"leader": "b2", "leader_epoch": 3, "isr": ["b2"], "epoch_start_seq": 7}
        zk.set(paths[0], encode(elected))  # as a broker's election writes it
        zk.delete(paths[1])
        assert partitions.write(session, topic) is None, "the placement stands"
        assert json.loads(zk.get(paths[0])[0]) == elected, "the brokers' state is never overwritten"
        assert json.loads(zk.get(paths[1])[0])["leader_epoch"] == 0, "a missing one is created again"

        partitions.write(session, SimpleNamespace(name="single", partition_count=2, replicas=1, ordered=False))
        assert zk.exists(chroot + LAYOUT.placement("single"))
        assert not zk.exists(chroot + f"{LAYOUT.PARTITION_STATE}/single"), "no election without replicas"
    finally:
        zk.delete(chroot, recursive=True)
