"""The wire's constants: frame header, flags, transaction states, error codes, message field indexes."""

from __future__ import annotations

import struct

PROTOCOL_VERSION = 1
MAGIC = b"SY"
HEADER = struct.Struct(">2sBBI")
HEADER_SIZE = HEADER.size
DEFAULT_MAX_FRAME = 16 * 1024 * 1024

# Message flags (stored with the message). FLAG_PREPARED: a transaction message, stored and not
# deliverable until the producer (or a back-check) commits it with `EndTx`.
FLAG_PREPARED = 0x01

# Transaction states (`TxEnded.state`, the broker admin API) and check answers (`TxState.state`).
TX_PREPARED, TX_COMMITTED, TX_ROLLED_BACK = "prepared", "committed", "rolled_back"
TX_COMMIT, TX_ROLLBACK, TX_UNKNOWN = "commit", "rollback", "unknown"
TX_ANSWERS = (TX_COMMIT, TX_ROLLBACK, TX_UNKNOWN)

# `Hello.features` keys. check_listener: true -> this connection answers `CheckTx` with `TxState`.
FEATURE_CHECK_LISTENER = "check_listener"

# The app id a broker introduces itself with to another broker of its cluster (its secret: the cluster secret).
REPLICA_APP = "__replica__"

# Error codes carried by `Error` frames.
E_BAD_FRAME = "bad_frame"
E_TOO_LARGE = "frame_too_large"
E_UNSUPPORTED = "unsupported"
E_NOT_AUTHENTICATED = "not_authenticated"
E_AUTH_FAILED = "auth_failed"
E_NOT_GRANTED = "not_granted"
E_NO_BINDING = "no_binding"
E_UNKNOWN_TOPIC = "unknown_topic"
E_TOPIC_RETIRED = "topic_retired"  # the topic takes no new messages (its backlog is still delivered)
E_INVALID = "invalid"
E_STORE_FAILED = "store_failed"
E_UNKNOWN_MESSAGE = "unknown_message"
E_HEARTBEAT = "heartbeat_timeout"
E_SLOW_CONSUMER = "slow_consumer"
E_SHUTTING_DOWN = "shutting_down"
E_TOO_MANY_CONNECTIONS = "too_many_connections"
E_INTERNAL = "internal"
E_DELAY_NOT_SUPPORTED = "delay_not_supported"  # a delayed message on a transactional or ordered topic
E_NOT_ENOUGH_REPLICAS = "not_enough_replicas"  # fewer replicas in sync than the cluster's min_insync: not stored
E_NOT_LEADER = "not_leader"  # the partition is not led by this broker: ask ZooKeeper for its leader and retry there
# a follower (broker to broker) holds seqs past the leader's epoch start that the leader never gave it: it may hold
# messages of a deposed leader the new one never had, so it empties its copy and fetches the partition anew
E_REPLICA_DIVERGED = "replica_diverged"
# ordered topics (issue 21): a message without an order key; a key sent to another partition than the one its
# logic partition maps to (the producer re-reads the placement); an ack from a consumer that no longer holds the
# message's partition (its assignment's generation is over: the message went to the partition's new holder)
E_KEY_REQUIRED = "key_required"
E_STALE_MAPPING = "stale_mapping"
E_STALE_GENERATION = "stale_generation"

# --- messages ------------------------------------------------------------------------------

# A message travels (and is stored) as a msgpack array of these fields, nested in the frame, so a
# frame of many messages is packed and unpacked by one msgpack call. Append new fields at the end only.
M_ID, M_TYPE, M_KEY, M_BUSINESS_ID, M_HEADERS, M_BODY, M_TTL_MS, M_DELIVERY_LIMIT, M_FLAGS, M_TIMESTAMP_MS = range(10)
MESSAGE_FIELDS = 10  # the fields every message has; optional ones follow
# Optional (issue 21): the Unix time in ms at which a delayed message becomes deliverable. Absent or 0: at once.
# A message that has it is kept by the broker's schedule until then, then stored and delivered like any other
# (still carrying the field, so consumers can see when it was due).
M_DELIVER_AT_MS = 10
MAX_DELAY_MS = 30 * 24 * 3600 * 1000  # how far ahead a message may be scheduled (30 days)

# who may send an event (BOTH: either side)
CLIENT, SERVER, BOTH = "client", "server", "both"
