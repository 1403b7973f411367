"""Every command's frame, byte for byte, as protocol version 1 defines it (written out by hand from the msgpack
spec, not produced by the encoder): the 8-byte header `SY`, version 1, the command code, the body's length
(big-endian), then the msgpack array of the fields in order."""

from __future__ import annotations

import pytest

from broker_core import protocol as p

# name: (code, who sends it, fields in wire order)
KINDS = {
    "Hello": (1, "client", ("version", "client_id", "app_id", "secret", "heartbeat_ms", "features")),
    "Publish": (2, "client", ("ref", "topic", "messages", "partition", "remapped")),  # both optional (issue 20, 21)
    "Subscribe": (3, "client", ("ref", "topic", "group", "credit", "ack_timeout_ms")),
    "Ready": (4, "client", ("sub_id", "credit")),
    "Ack": (5, "client", ("sub_id", "seqs")),
    "Nack": (6, "client", ("sub_id", "items")),
    "Unsubscribe": (7, "client", ("sub_id",)),
    "Ping": (8, "both", ()),
    "Pong": (9, "both", ()),
    "ListDeadLetters": (10, "client", ("ref", "topic", "group", "limit")),
    "Goodbye": (11, "both", ("reason",)),
    "EndTx": (12, "client", ("ref", "topic", "message_id", "commit")),
    "TxEnded": (13, "server", ("ref", "message_id", "state", "changed")),
    "CheckTx": (14, "server", ("check_id", "topic", "message_id", "message_type", "key", "business_id", "headers")),
    "TxState": (15, "client", ("check_id", "message_id", "state")),
    "Welcome": (20, "server", ("version", "node_id", "cluster", "heartbeat_ms", "max_frame")),
    "Published": (21, "server", ("ref", "first_seq", "count")),
    "Subscribed": (22, "server", ("ref", "sub_id", "mode", "credit", "ack_timeout_ms")),
    "Deliver": (23, "server", ("sub_id", "items")),
    "Error": (24, "server", ("ref", "code_name", "message", "fatal")),
    "DeadLetters": (25, "server", ("ref", "entries")),
    "Unsubscribed": (26, "server", ("sub_id", "reason")),
    "ReplicaFetch": (40, "client", ("topic", "partition", "from_seq", "leader_epoch", "log_epoch")),  # broker to broker (issue 20)
    "ReplicaRecords": (41, "server", ("topic", "partition", "batches")),
    "ReplicaStored": (42, "client", ("topic", "partition", "through_seq")),
    "ReplicaAcks": (43, "server", ("topic", "partition", "group", "seqs")),
    "ReplicaLog": (44, "server", ("topic", "partition", "first_seq", "count", "groups", "record")),
    "ReplicaTx": (45, "server", ("topic", "partition", "ops")),
    "ReplicaTxStored": (46, "client", ("topic", "partition", "number")),
    "ReplicaSchedule": (47, "server", ("topic", "partition", "ops")),
    "ReplicaScheduled": (48, "client", ("topic", "partition", "number")),
}

# the message array ["m1", "x", nil, nil, {}, b"b", 0, 0, 0, 0]: fixarray 10, fixstr, fixstr, nil, nil, fixmap 0,
# bin8 of 1 byte, four positive fixints
MESSAGE = "9a a2 6d31 a1 78 c0 c0 80 c4 01 62 00 00 00 00"

# (event, header after "SY" 01: code and length, body)
FRAMES = [
    (p.Hello(1, "c1", "app", "s", 500, {"sdk": "py"}),
     "01 00000016", "96 01 a2 6331 a3 617070 a1 73 cd 01f4 81 a3 73646b a2 7079"),
    (p.Publish(7, "t", [p.message("m1", "x", b"b")]), "02 00000016", "94 07 a1 74 91" + MESSAGE + " c0"),
    (p.Publish(7, "t", [p.message("m1", "x", b"b")], 3), "02 00000016", "94 07 a1 74 91" + MESSAGE + " 03"),
    (p.Publish(7, "t", [p.message("m1", "x", b"b")], 3, 2), "02 00000017", "95 07 a1 74 91" + MESSAGE + " 03 02"),
    (p.Subscribe(8, "t", "g", 100, 2000), "03 0000000a", "95 08 a1 74 a1 67 64 cd 07d0"),
    (p.Ready(1, 50), "04 00000003", "92 01 32"),
    (p.Ack(1, [1, 2, 3]), "05 00000006", "92 01 93 01 02 03"),
    (p.Nack(1, [[4, -1, "no"]]), "06 00000009", "92 01 91 93 04 ff a2 6e6f"),
    (p.Unsubscribe(1), "07 00000002", "91 01"),
    (p.Ping(), "08 00000001", "90"),
    (p.Pong(), "09 00000001", "90"),
    (p.ListDeadLetters(9, "t", "g", 10), "0a 00000007", "94 09 a1 74 a1 67 0a"),
    (p.Goodbye("bye"), "0b 00000005", "91 a3 627965"),
    (p.EndTx(3, "t", "m1", True), "0c 00000008", "94 03 a1 74 a2 6d31 c3"),
    (p.TxEnded(3, "m1", "committed", True), "0d 00000010", "94 03 a2 6d31 a9 636f6d6d6974746564 c3"),
    (p.CheckTx(5, "t", "m1", "x", None, "b1", {"h": "v"}),
     "0e 00000012", "97 05 a1 74 a2 6d31 a1 78 c0 a2 6231 81 a1 68 a1 76"),
    (p.TxState(5, "m1", "commit"), "0f 0000000c", "93 05 a2 6d31 a6 636f6d6d6974"),
    (p.Welcome(1, "n1", "c", 1000, 1 << 20), "14 0000000f", "95 01 a2 6e31 a1 63 cd 03e8 ce 00100000"),
    (p.Published(7, 100, 3), "15 00000004", "93 07 64 03"),
    (p.Subscribed(8, 1, "broadcast", 100, 30000), "16 00000011", "95 08 01 a9 62726f616463617374 64 cd 7530"),
    (p.Deliver(1, [[1, 2, p.message("m1", "x", b"b")]]), "17 00000016", "92 01 91 93 01 02" + MESSAGE),
    (p.Error(7, p.E_NOT_GRANTED, "no", False), "18 00000012", "94 07 ab 6e6f745f6772616e746564 a2 6e6f c2"),
    (p.Error(None, p.E_BAD_FRAME, "x", True), "18 0000000f", "94 c0 a9 6261645f6672616d65 a1 78 c3"),
    (p.DeadLetters(9, [{"seq": 1}]), "19 00000009", "92 09 91 81 a3 736571 01"),
    (p.Unsubscribed(1, "gone"), "1a 00000007", "92 01 a4 676f6e65"),
    (p.ReplicaFetch("t", 0, 1, 2, 1), "28 00000007", "95 a1 74 00 01 02 01"),
    # a batch: [first_seq 1, app "app", received_ms 5, [the message], [["g"]]]
    (p.ReplicaRecords("t", 0, [[1, "app", 5, [p.message("m1", "x", b"b")], [["g"]]]]), "29 00000021",
     "93 a1 74 00 91 95 01 a3 617070 05 91" + MESSAGE + " 91 91 a1 67"),
    (p.ReplicaStored("t", 0, 500), "2a 00000007", "93 a1 74 00 cd 01f4"),
    (p.ReplicaAcks("t", 0, "g", [1, 2]), "2b 00000009", "94 a1 74 00 a1 67 92 01 02"),
    # a log record of 2 bytes (bin8), first seq 1, one message owed to group "g"
    (p.ReplicaLog("t", 0, 1, 1, [["g"]], b"\x00\x01"), "2c 0000000e", "96 a1 74 00 01 01 91 91 a1 67 c4 02 0001"),
    # one transaction end: ["end", seq 7, message "m1", commit true, groups ["g"], at 5, reason "p", number 1]
    (p.ReplicaTx("t", 0, [["end", 7, "m1", True, ["g"], 5, "p", 1]]), "2d 00000016",
     "93 a1 74 00 91 98 a3 656e64 07 a2 6d31 c3 91 a1 67 05 a1 70 01"),
    (p.ReplicaTxStored("t", 0, 3), "2e 00000005", "93 a1 74 00 03"),
    # delivered through due time 5
    (p.ReplicaSchedule("t", 0, [["through", 5]]), "2f 0000000f", "93 a1 74 00 91 92 a7 7468726f756768 05"),
    (p.ReplicaScheduled("t", 0, 2), "30 00000005", "93 a1 74 00 02"),
]


def literal(header: str, body: str) -> bytes:
    return b"SY\x01" + bytes.fromhex(header + body)


def test_each_kind_has_its_code_sender_and_fields():
    assert {cls.__name__: (code, cls.sender, cls.field_names) for code, cls in p.EVENTS.items()} == KINDS
    assert {code for code, _, _ in KINDS.values()}.isdisjoint(p.RESERVED_CODES)
    assert p.RESERVED_CODES == {16, 17, 18, 19, 27}


def test_every_kind_has_a_literal_frame_here():
    assert {type(event).__name__ for event, _, _ in FRAMES} == set(KINDS)


@pytest.mark.parametrize("event,header,body", FRAMES, ids=[f"{type(e).__name__}-{i}" for i, (e, _, _) in enumerate(FRAMES)])
def test_frame_bytes(event, header, body):
    frame = literal(header, body)
    assert p.encode_frame(event) == frame
    # and the literal frame reads back as the event, at the side that receives it
    receiver = p.CLIENT if event.sender == p.SERVER else p.SERVER
    conn = p.Connection(receiver)
    conn.receive_data(frame)
    assert conn.next_event() == event
    assert conn.next_event() is p.NEED_DATA


def test_defaults_of_the_optional_fields():
    assert p.Goodbye() == p.Goodbye("")
    assert p.Hello(1, "c", "a", "s", 5).features == {}
    assert p.Error(1, p.E_INVALID, "m").fatal is False and p.Error(1, p.E_INVALID, "m").error_code == p.E_INVALID


@pytest.mark.parametrize("kind,body", [
    ("CheckTx", [5, "t", "m1", "x", 7, None, {}]),  # key: a string or nil
    ("Error", ["7", "invalid", "m", False]),  # ref: an integer or nil
    ("EndTx", [3, "t", "m1", "yes"]),  # commit: a boolean
])
def test_a_field_of_the_wrong_type_is_refused(kind, body):
    cls = getattr(p, kind)
    with pytest.raises(p.ProtocolError, match="wrong type"):
        cls.from_body(body)


def test_a_publish_of_a_client_from_before_partitions_is_read_and_a_bad_partition_or_remapped_refused():
    old = literal("02 00000015", "93 07 a1 74 91" + MESSAGE)  # three fields, as before issue 20
    conn = p.Connection(p.SERVER)
    conn.receive_data(old)
    assert conn.next_event() == p.Publish(7, "t", [p.message("m1", "x", b"b")])
    for bad in (-1, "0"):
        with pytest.raises(p.ProtocolError, match="partition"):
            p.Publish.from_body([7, "t", [], bad])
    for bad in (-1, "1", 1.0):
        with pytest.raises(p.ProtocolError, match="remapped"):
            p.Publish.from_body([7, "t", [], 0, bad])
    assert p.Publish.from_body([7, "t", [], 0, None]).remapped is None
    assert p.Publish.from_body([7, "t", [], None, 3]) == p.Publish(7, "t", [], None, 3)
