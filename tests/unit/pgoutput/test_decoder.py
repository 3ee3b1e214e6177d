"""Hand-written pgoutput byte strings, as Postgres sends them, and what they decode to.

Each case is written out field by field from the protocol documentation ("Logical
Replication Message Formats"), independently of the encoder; the encoder must produce the
very same bytes.
"""

from __future__ import annotations

import dataclasses

import pytest

from streambed.core.errors import DecodeError, Kind
from streambed.pgoutput import decoder as decoder_module
from streambed.pgoutput.decoder import Decoder, decode
from streambed.pgoutput.encoder import encode
from streambed.pgoutput.messages import (
    TRUNCATE_CASCADE,
    TRUNCATE_RESTART_IDENTITY,
    UNCHANGED,
    Begin,
    Binary,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    TupleValue,
    Type,
    Update,
)


def i8(n: int) -> bytes:
    return n.to_bytes(1, "big")


def i16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def u64(n: int) -> bytes:
    return n.to_bytes(8, "big")


def i64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def text(value: bytes) -> bytes:
    return b"t" + i32(len(value)) + value


LSN = 0x0000_0001_6B37_4D48  # 1/6B374D48
END_LSN = 0x0000_0001_6B37_4D78
TS = 769_011_696_123_456  # 2024-05-13 14:21:36.123456 UTC, in microseconds since 2000-01-01
XID = 748_213
REL = 16_385

# (id, payload, in_stream, expected)
CASES: list[tuple[str, bytes, bool, Message]] = [
    ("begin", b"B" + u64(LSN) + i64(TS) + u32(XID), False, Begin(LSN, TS, XID)),
    (
        "begin-before-2000",
        b"B" + u64(0) + i64(-1) + u32(0xFFFF_FFFF),
        False,
        Begin(0, -1, 0xFFFF_FFFF),
    ),
    (
        "commit",
        b"C" + i8(0) + u64(LSN) + u64(END_LSN) + i64(TS),
        False,
        Commit(0, LSN, END_LSN, TS),
    ),
    ("origin", b"O" + u64(LSN) + b"pg_16390\0", False, Origin(LSN, "pg_16390")),
    (
        "relation",
        b"R"
        + u32(REL)
        + b"public\0orders\0"
        + b"d"
        + i16(3)
        + (i8(1) + b"id\0" + u32(20) + i32(-1))
        + (i8(0) + b"amount\0" + u32(1700) + i32((12 << 16 | 2) + 4))
        + (i8(0) + b"note\0" + u32(25) + i32(-1)),
        False,
        Relation(
            REL,
            "public",
            "orders",
            "d",
            (
                RelationColumn(1, "id", 20, -1),
                RelationColumn(0, "amount", 1700, (12 << 16 | 2) + 4),
                RelationColumn(0, "note", 25, -1),
            ),
        ),
    ),
    (
        "relation-unicode-names-full-identity-no-columns",
        b"R"
        + u32(REL)
        + "Ventes\u00e9".encode()
        + b"\0"
        + "\u65e5\u672c".encode()
        + b"\0f"
        + i16(0),
        False,
        Relation(REL, "Ventes\u00e9", "\u65e5\u672c", "f", ()),
    ),
    (
        "relation-streamed",
        b"R" + u32(XID) + u32(REL) + b"s\0t\0i" + i16(1) + i8(1) + b"k\0" + u32(2950) + i32(-1),
        True,
        Relation(REL, "s", "t", "i", (RelationColumn(1, "k", 2950, -1),), xid=XID),
    ),
    ("type", b"Y" + u32(16_400) + b"public\0mood\0", False, Type(16_400, "public", "mood")),
    (
        "type-streamed",
        b"Y" + u32(XID) + u32(16_400) + b"public\0mood\0",
        True,
        Type(16_400, "public", "mood", xid=XID),
    ),
    (
        "insert-four-columns",
        b"I"
        + u32(REL)
        + b"N"
        + i16(4)
        + text(b"42")
        + text(b"alice@example.com")
        + text(b"2024-05-13 14:21:36.123456+00")
        + b"n",
        False,
        Insert(REL, (b"42", b"alice@example.com", b"2024-05-13 14:21:36.123456+00", None)),
    ),
    (
        "insert-empty-string-utf8-and-binary",
        b"I"
        + u32(REL)
        + b"N"
        + i16(3)
        + text(b"")
        + text("caf\u00e9".encode())
        + b"b"
        + i32(4)
        + b"\x00\x00\x00\x2a",
        False,
        Insert(REL, (b"", "caf\u00e9".encode(), Binary(b"\x00\x00\x00\x2a"))),
    ),
    ("insert-no-columns", b"I" + u32(REL) + b"N" + i16(0), False, Insert(REL, ())),
    (
        "insert-streamed",
        b"I" + u32(XID) + u32(REL) + b"N" + i16(2) + text(b"1") + b"n",
        True,
        Insert(REL, (b"1", None), xid=XID),
    ),
    (
        "update-new-only",
        b"U" + u32(REL) + b"N" + i16(2) + text(b"1") + text(b"paid"),
        False,
        Update(REL, (b"1", b"paid")),
    ),
    (
        "update-key-changed",
        b"U"
        + u32(REL)
        + b"K"
        + i16(3)
        + text(b"1")
        + b"n"
        + b"n"
        + b"N"
        + i16(3)
        + text(b"2")
        + text(b"9.99")
        + b"u",
        False,
        Update(REL, (b"2", b"9.99", UNCHANGED), old=(b"1", None, None), old_is_key_only=True),
    ),
    (
        "update-replica-identity-full",
        b"U"
        + u32(REL)
        + b"O"
        + i16(2)
        + text(b"1")
        + text(b"open")
        + b"N"
        + i16(2)
        + text(b"1")
        + text(b"closed"),
        False,
        Update(REL, (b"1", b"closed"), old=(b"1", b"open"), old_is_key_only=False),
    ),
    (
        "update-streamed-unchanged-toast",
        b"U" + u32(XID) + u32(REL) + b"N" + i16(2) + text(b"7") + b"u",
        True,
        Update(REL, (b"7", UNCHANGED), xid=XID),
    ),
    (
        "delete-key",
        b"D" + u32(REL) + b"K" + i16(3) + text(b"1") + b"n" + b"n",
        False,
        Delete(REL, (b"1", None, None), old_is_key_only=True),
    ),
    (
        "delete-replica-identity-full",
        b"D" + u32(REL) + b"O" + i16(3) + text(b"1") + text(b"9.99") + text(b"x"),
        False,
        Delete(REL, (b"1", b"9.99", b"x"), old_is_key_only=False),
    ),
    (
        "delete-streamed",
        b"D" + u32(XID) + u32(REL) + b"K" + i16(1) + text(b"1"),
        True,
        Delete(REL, (b"1",), old_is_key_only=True, xid=XID),
    ),
    (
        "truncate-several-relations-cascade-restart-identity",
        b"T" + i32(3) + i8(3) + u32(REL) + u32(REL + 1) + u32(4_000_000_000),
        False,
        Truncate(TRUNCATE_CASCADE | TRUNCATE_RESTART_IDENTITY, (REL, REL + 1, 4_000_000_000)),
    ),
    (
        "truncate-streamed",
        b"T" + u32(XID) + i32(1) + i8(0) + u32(REL),
        True,
        Truncate(0, (REL,), xid=XID),
    ),
    (
        "message-transactional-binary-content",
        b"M" + i8(1) + u64(LSN) + b"streambed.heartbeat\0" + i32(5) + b"\x00\xff\x00\x01\n",
        False,
        LogicalMessage(1, LSN, "streambed.heartbeat", b"\x00\xff\x00\x01\n"),
    ),
    (
        "message-non-transactional-empty",
        b"M" + i8(0) + u64(LSN) + b"\0" + i32(0),
        False,
        LogicalMessage(0, LSN, "", b""),
    ),
    (
        "message-streamed",
        b"M" + u32(XID) + i8(1) + u64(LSN) + b"app\0" + i32(2) + b"hi",
        True,
        LogicalMessage(1, LSN, "app", b"hi", xid=XID),
    ),
    ("stream-start-first", b"S" + u32(XID) + i8(1), False, StreamStart(XID, True)),
    ("stream-start-later", b"S" + u32(XID) + i8(0), False, StreamStart(XID, False)),
    ("stream-stop", b"E", True, StreamStop()),
    (
        "stream-commit",
        b"c" + u32(XID) + i8(0) + u64(LSN) + u64(END_LSN) + i64(TS),
        False,
        StreamCommit(XID, 0, LSN, END_LSN, TS),
    ),
    (
        "stream-abort-subtransaction",
        b"A" + u32(XID) + u32(XID + 3),
        False,
        StreamAbort(XID, XID + 3),
    ),
    ("stream-abort-whole", b"A" + u32(XID) + u32(XID), False, StreamAbort(XID, XID)),
]


@pytest.mark.parametrize(
    ("payload", "in_stream", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decodes_hand_written_message(payload: bytes, in_stream: bool, expected: Message) -> None:
    assert decode(payload, in_stream=in_stream) == expected
    assert decode(memoryview(payload), in_stream=in_stream) == expected
    assert decode(bytearray(payload), in_stream=in_stream) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("payload", "in_stream", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_encoder_writes_the_same_bytes(payload: bytes, in_stream: bool, expected: Message) -> None:
    assert encode(expected, in_stream=in_stream) == payload


def test_decoded_values_are_bytes_and_unchanged_is_the_singleton() -> None:
    payload = b"U" + u32(REL) + b"N" + i16(3) + text(b"x") + b"u" + b"n"
    message = decode(payload, in_stream=False)
    assert isinstance(message, Update)
    assert type(message.new[0]) is bytes
    assert message.new[1] is UNCHANGED
    assert message.new[2] is None


@pytest.mark.parametrize(
    "message",
    [
        decode(b"I" + u32(REL) + b"N" + i16(1) + text(b"1"), in_stream=False),
        decode(b"U" + u32(REL) + b"N" + i16(1) + text(b"1"), in_stream=False),
        decode(b"D" + u32(REL) + b"K" + i16(1) + text(b"1"), in_stream=False),
    ],
    ids=["insert", "update", "delete"],
)
def test_row_messages_behave_like_their_dataclass(message: Message) -> None:
    # Insert, Update and Delete are built without __init__ for speed: they must still be
    # complete, equal to and hashed like normally built instances, and frozen.
    rebuilt = dataclasses.replace(message)
    assert rebuilt == message
    assert hash(rebuilt) == hash(message)
    assert repr(rebuilt) == repr(message)
    field = dataclasses.fields(message)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(message, field, 0)


def test_fast_built_classes_are_checked_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(decoder_module._FAST_BUILT_FIELDS, Insert, ("relation_id", "new"))
    with pytest.raises(ImportError, match="Insert changed"):
        decoder_module._check_fast_built_classes()


def test_relation_columns_report_the_key_flag() -> None:
    payload = next(case[1] for case in CASES if case[0] == "relation")
    relation = decode(payload, in_stream=False)
    assert isinstance(relation, Relation)
    assert [column.is_key for column in relation.columns] == [True, False, False]


# (id, payload, in_stream, message kind, offset, words in the detail)
ERRORS: list[tuple[str, bytes, bool, str, int, str]] = [
    ("empty", b"", False, "unknown", 0, "empty"),
    ("unknown-type-byte", b"Z" + u32(1), False, "unknown", 0, "0x5a"),
    ("begin-truncated", b"B" + u64(LSN) + i64(TS) + b"\0\0", False, "Begin", 1, "ends"),
    (
        "begin-trailing",
        b"B" + u64(LSN) + i64(TS) + u32(XID) + b"\0",
        False,
        "Begin",
        21,
        "1 unexpected",
    ),
    ("commit-truncated", b"C\0", False, "Commit", 1, "ends"),
    ("origin-not-terminated", b"O" + u64(LSN) + b"pg_1", False, "Origin", 9, "NUL"),
    (
        "relation-bad-utf8",
        b"R" + u32(REL) + b"p\xffx\0t\0d" + i16(0),
        False,
        "Relation",
        6,
        "UTF-8",
    ),
    (
        "relation-bad-identity",
        b"R" + u32(REL) + b"p\0t\0x" + i16(0),
        False,
        "Relation",
        9,
        "identity",
    ),
    (
        "relation-negative-columns",
        b"R" + u32(REL) + b"p\0t\0d" + i16(-1),
        False,
        "Relation",
        10,
        "negative",
    ),
    (
        "relation-column-truncated",
        b"R" + u32(REL) + b"p\0t\0d" + i16(1) + i8(1) + b"id\0" + u32(23),
        False,
        "Relation",
        16,
        "column type",
    ),
    ("type-not-terminated", b"Y" + u32(1) + b"public\0mo", False, "Type", 12, "NUL"),
    ("insert-not-new", b"I" + u32(REL) + b"K" + i16(0), False, "Insert", 5, "'N'"),
    (
        "insert-bad-value-kind",
        b"I" + u32(REL) + b"N" + i16(2) + b"n" + b"x",
        False,
        "Insert",
        9,
        "0x78",
    ),
    (
        "insert-negative-length",
        b"I" + u32(REL) + b"N" + i16(1) + b"t" + i32(-2) + b"ab",
        False,
        "Insert",
        8,
        "negative text value length -2",
    ),
    (
        "insert-length-past-end",
        b"I" + u32(REL) + b"N" + i16(1) + b"t" + i32(5) + b"ab",
        False,
        "Insert",
        8,
        "runs past the end",
    ),
    ("insert-fewer-values", b"I" + u32(REL) + b"N" + i16(3) + b"nn", False, "Insert", 10, "ends"),
    ("insert-negative-count", b"I" + u32(REL) + b"N" + i16(-3), False, "Insert", 6, "negative"),
    (
        "insert-trailing",
        b"I" + u32(REL) + b"N" + i16(1) + b"n" + b"n",
        False,
        "Insert",
        9,
        "unexpected",
    ),
    ("insert-length-cut", b"I" + u32(REL) + b"N" + i16(1) + b"t\0\0", False, "Insert", 8, "ends"),
    ("insert-streamed-without-xid", b"I" + u32(XID) + b"N", True, "Insert", 1, "ends"),
    (
        "update-key-without-new",
        b"U" + u32(REL) + b"K" + i16(1) + text(b"1"),
        False,
        "Update",
        14,
        "new tuple",
    ),
    (
        "update-old-then-not-new",
        b"U" + u32(REL) + b"O" + i16(0) + b"O" + i16(0),
        False,
        "Update",
        8,
        "expected",
    ),
    ("update-bad-marker", b"U" + u32(REL) + b"X", False, "Update", 5, "expected"),
    ("delete-new-marker", b"D" + u32(REL) + b"N" + i16(0), False, "Delete", 5, "expected"),
    (
        "delete-binary-negative",
        b"D" + u32(REL) + b"O" + i16(1) + b"b" + i32(-1),
        False,
        "Delete",
        8,
        "negative",
    ),
    ("truncate-negative-count", b"T" + i32(-1) + i8(0), False, "Truncate", 1, "negative"),
    (
        "truncate-ids-cut",
        b"T" + i32(2) + i8(0) + u32(REL) + b"\0",
        False,
        "Truncate",
        6,
        "relation ids",
    ),
    (
        "truncate-trailing",
        b"T" + i32(1) + i8(0) + u32(REL) + b"\0",
        False,
        "Truncate",
        10,
        "unexpected",
    ),
    (
        "message-negative-length",
        b"M" + i8(1) + u64(LSN) + b"p\0" + i32(-1),
        False,
        "Message",
        12,
        "content length",
    ),
    (
        "message-content-cut",
        b"M" + i8(1) + u64(LSN) + b"p\0" + i32(4) + b"ab",
        False,
        "Message",
        12,
        "content length",
    ),
    ("stream-start-truncated", b"S" + u32(XID), False, "StreamStart", 1, "ends"),
    ("stream-start-bad-flag", b"S" + u32(XID) + i8(2), False, "StreamStart", 5, "0 or 1"),
    ("stream-stop-trailing", b"E\0", True, "StreamStop", 1, "unexpected"),
    ("stream-commit-truncated", b"c" + u32(XID), False, "StreamCommit", 1, "ends"),
    (
        "stream-abort-protocol-4",
        b"A" + u32(XID) + u32(XID) + u64(LSN) + i64(TS),
        False,
        "StreamAbort",
        9,
        "protocol 4",
    ),
]


@pytest.mark.parametrize(
    ("payload", "in_stream", "message_kind", "offset", "detail"),
    [case[1:] for case in ERRORS],
    ids=[case[0] for case in ERRORS],
)
def test_malformed_input_raises_decode_error(
    payload: bytes, in_stream: bool, message_kind: str, offset: int, detail: str
) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(payload, in_stream=in_stream)
    error = caught.value
    assert (error.message_kind, error.offset) == (message_kind, offset)
    assert detail in error.detail
    assert error.kind is Kind.DECODE
    assert f"at byte {offset}" in str(error)


class TestDecoder:
    def test_tracks_streamed_blocks(self) -> None:
        decoder = Decoder()
        commit = b"c" + u32(XID) + i8(0) + u64(LSN) + u64(END_LSN) + i64(TS)
        steps: list[tuple[bytes | memoryview, Message, bool]] = [
            (b"S" + u32(XID) + i8(1), StreamStart(XID, True), True),
            (b"I" + u32(XID) + u32(REL) + b"N" + i16(1) + b"n", Insert(REL, (None,), XID), True),
            (memoryview(b"E"), StreamStop(), False),
            (b"I" + u32(REL) + b"N" + i16(1) + b"n", Insert(REL, (None,)), False),
            (commit, StreamCommit(XID, 0, LSN, END_LSN, TS), False),
        ]
        assert not decoder.in_stream
        for payload, expected, in_stream_after in steps:
            assert decoder.decode(payload) == expected
            assert decoder.in_stream == in_stream_after

    def test_stream_stop_outside_block_is_an_error(self) -> None:
        decoder = Decoder()
        with pytest.raises(DecodeError, match="outside a streamed block") as caught:
            decoder.decode(b"E")
        assert caught.value.message_kind == "StreamStop"
        assert not decoder.in_stream

    def test_nested_stream_start_is_an_error_and_keeps_state(self) -> None:
        decoder = Decoder()
        decoder.decode(b"S" + u32(XID) + i8(1))
        with pytest.raises(DecodeError, match="inside a streamed block"):
            decoder.decode(b"S" + u32(XID) + i8(0))
        assert decoder.in_stream
        with pytest.raises(DecodeError):
            decoder.decode(b"")
        assert decoder.in_stream
        assert decoder.decode(b"E") == StreamStop()

    def test_same_results_as_decode(self) -> None:
        decoder = Decoder()
        for _, payload, in_stream, expected in CASES:
            if in_stream != decoder.in_stream:
                decoder.decode(b"S" + u32(XID) + i8(0) if in_stream else b"E")
            assert decoder.decode(payload) == expected


@pytest.mark.parametrize("count", [0, 1, 4, 64, 65])
@pytest.mark.parametrize("last", [b"x" * 300, b"", None, UNCHANGED, Binary(b"\x00\x01")])
def test_insert_fast_readers_agree_with_the_generic_reader(count: int, last: TupleValue) -> None:
    """Text/NULL tuples take a reader made per column count; anything else falls back."""
    values: TupleData = tuple(None if i % 3 == 1 else b"%d" % i for i in range(count))
    if count:
        values = (*values[:-1], last)
    message = Insert(16385, values)
    payload = encode(message, in_stream=False)
    assert decode(payload, in_stream=False) == message
    size = len(payload)
    padded = payload + decoder_module._PAD
    generic = decoder_module._read_values(padded, 8, size, count, "Insert")
    assert generic == (values, size)
    for cut in range(8, size):  # every truncation inside the tuple is still one DecodeError
        with pytest.raises(DecodeError) as caught:
            decode(payload[:cut], in_stream=False)
        assert caught.value.message_kind == "Insert"
        assert 0 <= caught.value.offset <= cut
