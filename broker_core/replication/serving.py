"""What a broker's client connection does for another broker of its cluster (issue 20): a `Hello` with the
replica app id and the cluster secret makes it a replica connection, which may ask for a partition's records
(`ReplicaFetch`) and say what it stored (`ReplicaStored`, `ReplicaTxStored`, `ReplicaScheduled`); no other connection may. Mixed
into the node's
`ClientConnection`, which holds `broker` (with its `replication`), `fail`, `error` and `_welcome`."""

from __future__ import annotations

import hmac

from broker_core import protocol as p


class ReplicaServing:
    replica = False

    def replica_hello(self, ev: p.Hello) -> None:
        secret = self.broker.replication.secret
        if not secret or not hmac.compare_digest(ev.secret.encode(), secret.encode()):
            self.broker.auth_failures += 1
            self.fail(p.E_AUTH_FAILED, "wrong cluster secret, or this broker has none "
                                       "(SWITCHYARD_BROKER_CLUSTER_SECRET_FILE): replication refused")
            return
        self.replica = True
        self._welcome(ev)

    def on_replica_fetch(self, ev: p.ReplicaFetch) -> None:
        if self.replica:
            self.broker.replication.fetch(self, ev)
        else:
            self.error(None, p.E_NOT_GRANTED, "only a broker of this cluster may fetch a partition's records")

    def on_replica_stored(self, ev: p.ReplicaStored) -> None:
        if self.replica:
            self.broker.replication.stored(self, ev)

    def on_replica_tx_stored(self, ev: p.ReplicaTxStored) -> None:
        if self.replica:
            self.broker.replication.tx_stored(self, ev)


    def on_replica_scheduled(self, ev: p.ReplicaScheduled) -> None:
        if self.replica:
            self.broker.replication.schedule_stored(self, ev)


REPLICA_HANDLERS = {p.ReplicaFetch: ReplicaServing.on_replica_fetch,
                    p.ReplicaStored: ReplicaServing.on_replica_stored,
                    p.ReplicaTxStored: ReplicaServing.on_replica_tx_stored,
                    p.ReplicaScheduled: ReplicaServing.on_replica_scheduled}
