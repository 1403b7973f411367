"""What a publish must satisfy before the broker stores it (pure checks on the broker's view of ZooKeeper).

The topic exists in the cluster and is not retired, the app holds a grant to publish on it, and every
message is well-formed, within the topic's size limit, of a type the topic declares, and either every
message is prepared (a transaction message, on a transactional topic) or none. A delayed message (its
deliver-at field set) is due at most 30 days ahead, and only on a topic that is neither transactional nor
ordered (`delay_not_supported`); on a topic whose partition 0 has replicas (they keep its schedule) it is sent to
partition 0. On an ordered topic every message has an order key (`key_required`) that maps
to the partition it was sent to (`stale_mapping`). The topic document is
read at each publish, so a change the control plane writes applies to the next publish.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from broker_core import protocol as p
from broker_core.cluster.state import ClusterState, TopicConfig
from broker_core.layout import physical_partition


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # a protocol error code (`protocol.E_*`)
    message: str  # what the producer should do


@dataclass(slots=True)
class PublishPlan:
    """An accepted publish: its body bytes, whether it holds prepared messages, and how many are delayed (due
    later than `now_ms`, the time it was checked at)."""

    size: int
    prepared: bool
    delayed: int = 0
    now_ms: int = 0
    partition: int | None = None  # the partition it goes to (None: the topic has no placement)


def check_publish(state: ClusterState, cluster: str, topic: str, app_id: str, messages: list,
                  default_limit: int, node_id: str = "", partition: int | None = None) -> PublishPlan | Refusal:
    """The plan of an acceptable publish, or why it is refused. A malformed message array raises
    `protocol.ProtocolError` (the connection that sent it is closed)."""
    config = state.topics.get(topic)
    if config is None:
        return Refusal(p.E_UNKNOWN_TOPIC, f"topic {topic!r} does not exist in cluster {cluster!r}")
    if config.retired:
        return Refusal(p.E_TOPIC_RETIRED, f"topic {topic} is retired; new messages are refused (its backlog is "
                                          "still delivered): publish to the topic that replaces it")
    if not state.may_publish(topic, app_id):
        return Refusal(p.E_NOT_GRANTED, f"app {app_id!r} has no grant to publish on topic {topic!r}")
    if not messages:
        return Refusal(p.E_INVALID, "a publish needs at least one message")
    limit = config.max_message_bytes or default_limit
    types = config.message_types
    check = p.check_message
    size = prepared = delayed = 0
    now_ms = int(time.time() * 1000)
    m_id, m_body, m_type, m_flags, m_at = p.M_ID, p.M_BODY, p.M_TYPE, p.M_FLAGS, p.M_DELIVER_AT_MS
    for fields in messages:
        check(fields)
        if len(fields) > m_at and fields[m_at] > now_ms:
            refusal = _delay_refusal(config, fields[m_id], fields[m_at] - now_ms)
            if refusal is not None:
                return refusal
            delayed += 1
        body_size = len(fields[m_body])
        size += body_size
        if body_size > limit:
            return Refusal(p.E_INVALID, f"message {fields[m_id]} has a body of {body_size} bytes; the limit of "
                                        f"topic {topic!r} is {limit}")
        if types and fields[m_type] not in types:
            return Refusal(p.E_INVALID, f"message type {fields[m_type]!r} is not declared on topic {topic!r} "
                                        f"(declared: {', '.join(types)})")
        if fields[m_flags] & p.FLAG_PREPARED:
            prepared += 1
    if prepared:
        refusal = _prepared_refusal(config, prepared, len(messages))
        if refusal is not None:
            return refusal
    placed = publish_partition(state, node_id, topic, partition)
    if isinstance(placed, Refusal):
        return placed
    if delayed and placed and len((state.placements.get(topic) or {}).get(0, ())) > 1:
        return Refusal(p.E_INVALID, f"topic {topic!r} is replicated: its delayed messages are kept by the replicas "
                                    f"of its partition 0, not {placed}; send them there (the SDK does)")
    if config.ordered:
        refusal = _order_refusal(config, messages, placed, state.mapped_partitions(topic))
        if refusal is not None:
            return refusal
    return PublishPlan(size, bool(prepared), delayed, now_ms, placed)


# a producer's clock may run ahead of the broker's: this much past the limit is still accepted
DELAY_CLOCK_SLACK_MS = 60_000


def _delay_refusal(config: TopicConfig, message_id: str, delay_ms: int) -> Refusal | None:
    if config.transactional or config.ordered:
        kind = "transactional" if config.transactional else "ordered"
        return Refusal(p.E_DELAY_NOT_SUPPORTED, f"topic {config.name!r} is {kind}: delayed messages are refused "
                                                "there; send without delay, or use a topic that is neither "
                                                "transactional nor ordered")
    if delay_ms > p.MAX_DELAY_MS + DELAY_CLOCK_SLACK_MS:
        return Refusal(p.E_INVALID, f"message {message_id} is due in {delay_ms / 86_400_000:.1f} days; a message "
                                    "may be delayed by at most 30 days")
    return None


def _order_refusal(config: TopicConfig, messages: list, partition: int | None, partitions: int) -> Refusal | None:
    """An ordered topic: every message has an order key, and each key maps (`layout.physical_partition`) to the
    partition the publish was sent to."""
    m_key = p.M_KEY
    for fields in messages:
        key = fields[m_key]
        if not key:
            return Refusal(p.E_KEY_REQUIRED, f"topic {config.name!r} is ordered: every message needs an order key "
                                             f"(message {fields[p.M_ID]} has none); send it with key=...")
        if partition is not None and physical_partition(key, partitions) != partition:
            return Refusal(p.E_STALE_MAPPING, f"key {key!r} of ordered topic {config.name!r} maps to partition "
                                              f"{physical_partition(key, partitions)} of {partitions}, not "
                                              f"{partition}: read /placement/{config.name} again and send there")
    return None


def _prepared_refusal(config: TopicConfig, prepared: int, count: int) -> Refusal | None:
    if not config.transactional:
        return Refusal(p.E_INVALID, f"topic {config.name!r} is not transactional: prepared (transaction) messages "
                                    "are refused; send them as plain messages, or ask for a transactional topic")
    if prepared != count:
        return Refusal(p.E_INVALID, "a publish holds either only prepared messages or none; send transaction "
                                    "messages in a publish of their own")
    return None


def publish_partition(state: ClusterState, node_id: str, topic: str, partition: int | None) -> int | None | Refusal:
    """The partition a publish goes to on this broker (None: the topic has no placement: one partition held by
    every broker, as before layout 3), or why it is refused: a partition this broker does not lead gets
    `not_leader` (the SDK reads where it is led and sends there)."""
    placed = state.placements.get(topic)
    if placed is None:
        if partition:
            return Refusal(p.E_INVALID, f"topic {topic!r} has one partition; partition {partition} does not exist")
        return None
    if partition is None:  # a client from before partitions: a partition led here, if any
        partition = next((pid for pid in placed if state.leader_of(topic, pid) == node_id), None)
        if partition is None:
            return Refusal(p.E_NOT_LEADER, f"this broker leads no partition of topic {topic!r}; read "
                                           f"/placement/{topic} and send to a leader")
    if partition not in placed:
        return Refusal(p.E_INVALID, f"topic {topic!r} has {len(placed)} partitions; partition {partition} does "
                                    "not exist")
    leader = state.leader_of(topic, partition)
    if leader != node_id:
        return Refusal(p.E_NOT_LEADER, f"partition {partition} of topic {topic!r} is led by {leader!r}, not this "
                                       f"broker ({node_id}): send it there")
    return partition
