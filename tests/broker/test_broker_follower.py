"""The SDK's per-broker bookkeeping (consumer sessions, check connections) following a cluster's broker list."""

from __future__ import annotations

import asyncio

from broker_core.client.connection import BrokerAddress
from broker_core.client.discovery import BrokerFollower, Discovery

A, B, C = BrokerAddress("n1", "h", 1), BrokerAddress("n2", "h", 2), BrokerAddress("n3", "h", 3)


def test_one_item_per_listed_broker_kept_while_away_until_forgotten():
    loop = asyncio.new_event_loop()
    try:
        discovery = Discovery(loop, "c")
        discovery._set([A, B])
        made = []
        follower = BrokerFollower(discovery, lambda address: made.append(address) or f"session {address.port}", 3600)
        assert follower.items == {A: "session 1", B: "session 2"} and made == [A, B]
        discovery._set([B, C])  # A left: kept (it may be restarting), C joined
        assert follower.items == {A: "session 1", B: "session 2", C: "session 3"} and made == [A, B, C]
        assert not follower.gone_too_long(A) and not follower.gone_too_long(B)
        discovery._set([A, B, C])  # A is back: the same item, not away any more
        assert made == [A, B, C] and not follower.gone_too_long(A)
        discovery._set([B])
        follower.forget_after = 0.0  # away longer than that at once
        assert follower.gone_too_long(A) and follower.gone_too_long(C) and not follower.gone_too_long(B)
        follower.close()
        discovery._set([A, B, C, BrokerAddress("n4", "h", 4)])  # no longer followed
        assert len(made) == 3 and discovery.listeners == []
    finally:
        loop.close()
