"""What a move checks before it starts, and the reasons it refuses (docs/migration.md, "What is refused").

`refusals` needs only the database; `probe` asks both clusters' ZooKeeper and brokers (bounded by the
ZooKeeper and admin timeouts) and runs outside any transaction. Each refusal is a sentence saying why and
what to do, under the field it is about (topic, target, dead_letters).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.clusters.choices import ClusterStatus, StorageLevel
from apps.clusters.zookeeper import read_health
from apps.moves.brokers import AdminClient
from apps.moves.choices import OPEN_STATES, DeadLetters
from apps.moves.models import TopicMove
from apps.provisioning.desired import holder_ids
from apps.topics.choices import TopicStatus
from apps.transactions.broker_admin import BrokerAdminError, BrokerEndpoint

ORDERED_REFUSAL = (
    "Topic {name} is ordered, and the drain barrier that keeps each key's messages in order across two clusters "
    "(no key delivered from the target before it is drained on the source) is not built yet. Ordered topics are "
    "not moved; keep it on {cluster}.")


@dataclass
class Probe:
    refusals: dict[str, list[str]] = field(default_factory=dict)
    figures: dict = field(default_factory=dict)

    def refuse(self, key: str, message: str) -> None:
        self.refusals.setdefault(key, []).append(message)


def refusals(topic, target, dead_letters: str | None) -> dict[str, list[str]]:
    """What the database alone says cannot be done safely."""
    out: dict[str, list[str]] = {}

    def refuse(key: str, message: str) -> None:
        out.setdefault(key, []).append(message)

    if topic.status != TopicStatus.ACTIVE:
        refuse("topic", f"Topic {topic.name} is {topic.get_status_display().lower()}: only active topics move.")
    if topic.ordered:
        refuse("topic", ORDERED_REFUSAL.format(name=topic.name, cluster=topic.cluster.name))
    busy = TopicMove.objects.filter(topic=topic, state__in=OPEN_STATES).first()
    if busy is not None:
        refuse("topic", f"Move #{busy.pk} of topic {topic.name} is {busy.get_state_display().lower()} at step "
                        f"'{busy.get_step_display()}': wait for it to end, or roll it back, before moving it again.")
    else:
        others = [c for c in holder_ids(topic) if c != topic.cluster_id]
        if others:
            refuse("topic", f"Topic {topic.name} is held by more than its serving cluster {topic.cluster.name} "
                            f"(placements left by hand or by an earlier move): remove them first.")
    if target.pk == topic.cluster_id:
        refuse("target", f"Cluster {target.name} already serves topic {topic.name}: choose another cluster.")
    if target.environment != topic.environment:
        refuse("target", f"Cluster {target.name} belongs to {target.get_environment_display()}, topic {topic.name} "
                         f"to {topic.get_environment_display()}: a topic moves within its environment only.")
    if target.status != ClusterStatus.ACTIVE:
        refuse("target", f"Cluster {target.name} is {target.get_status_display().lower()}: move topics to an "
                         f"active cluster only.")
    if target.storage_level == StorageLevel.MEMORY and topic.storage_level == StorageLevel.FILE:
        refuse("target", f"Cluster {target.name} keeps messages in memory only, and topic {topic.name} needs file "
                         f"storage{' (it is transactional)' if topic.transactional else ''}: its messages would not "
                         f"survive a broker restart there. Choose a file-storage cluster.")
    if dead_letters is not None and dead_letters not in DeadLetters.values:
        refuse("dead_letters", f"Say what happens to the source's dead letters: {' or '.join(DeadLetters.values)}.")
    return out


def probe(topic, target) -> Probe:
    """Both clusters answer: their ZooKeeper, at least one registered broker, and every broker's drain endpoint
    (which tells how much of the topic it holds: the source's dead letters are counted from it)."""
    out = Probe()
    for role, cluster in (("target", target), ("source", topic.cluster)):
        health = read_health(cluster)
        key = "target" if role == "target" else "topic"
        if not health.reachable:
            out.refuse(key, f"ZooKeeper of the {role} cluster {cluster.name} is unreachable ({health.error}): "
                            f"a move needs both clusters' ZooKeeper; try again when it answers.")
            continue
        brokers = [BrokerEndpoint(b.node_id, b.host, int(b.metrics_port)) for b in health.brokers if b.metrics_port]
        if not brokers:
            out.refuse(key, f"No broker of the {role} cluster {cluster.name} is registered in its ZooKeeper: "
                            f"start its brokers before moving the topic.")
            continue
        figures = {"brokers": len(brokers), "dead_letters": 0, "held_by": 0}
        for endpoint in brokers:
            try:
                with AdminClient(endpoint) as client:
                    answer = client.drain(topic.name)
            except BrokerAdminError as exc:
                if exc.status == 404:
                    out.refuse(key, f"Broker {endpoint.node_id} of the {role} cluster {cluster.name} has no drain "
                                    f"endpoint (/admin/drain): it is older than moves; upgrade it first.")
                else:
                    out.refuse(key, f"Broker {endpoint.node_id} of the {role} cluster {cluster.name} did not answer "
                                    f"its admin API ({exc}); a move must read every broker.")
                continue
            figures["held_by"] += 1 if answer.get("held") else 0
            figures["dead_letters"] += sum(int((g or {}).get("dead_letters") or 0)
                                           for g in (answer.get("groups") or {}).values())
        out.figures[role] = {"cluster": cluster.name, **figures}
    return out


def dead_letter_refusal(topic, dead_letters: str | None, figures: dict) -> dict[str, list[str]]:
    """With dead letters on the source, the move needs an explicit choice."""
    held = figures.get("source", {}).get("dead_letters", 0)
    if dead_letters is None and held:
        return {"dead_letters": [
            f"Cluster {topic.cluster.name} holds {held:,} dead letters of topic {topic.name}: choose 'move' (they are "
            f"exported to the target once the source is drained) or 'discard' (deleted with the source)."]}
    return {}
