"""Connection slots (pending apart from sessions), unsigned parameter counts, and the
handler's admission step, on the real LakeDatabase."""

from __future__ import annotations

import struct

import pytest

from streambed.server.wire import messages
from streambed.server.wire.auth import UserStore
from streambed.server.wire.handler import ConnectionHandler, Database
from streambed.server.wire.slots import Slots
from tests.unit.wire.test_handler import (
    SYNC,
    _c,
    _frame,
    bind,
    describe,
    execute,
    parse,
    query,
    run,
)

MANY = 40_000  # more than a signed 16-bit count holds


def test_pending_and_session_slots_are_counted_apart() -> None:
    slots = Slots(max_pending=2, max_sessions=1)
    first, second = slots.reserve(), slots.reserve()
    assert first is not None and second is not None
    assert slots.reserve() is None  # the pending cap
    assert slots.admit(first)
    assert (slots.pending, slots.sessions) == (1, 1)
    third = slots.reserve()  # the admitted connection gave its pending slot back
    assert third is not None
    assert not slots.admit(second)  # the session cap: second stays pending
    assert slots.sessions_full()
    slots.release(first)
    slots.release(first)  # twice: counted once
    assert (slots.pending, slots.sessions) == (2, 0)
    assert slots.admit(second)
    slots.release(second)
    slots.release(third)
    assert (slots.pending, slots.sessions) == (0, 0)


def _parse_many(sql: str, n: int) -> bytes:
    body = _c("") + _c(sql) + struct.pack("!H", n) + struct.pack(f"!{n}I", *([23] * n))
    return _frame(b"P", body)


def _bind_many(values: list[bytes], formats: int) -> bytes:
    body = _c("") + _c("") + struct.pack("!H", formats) + b"\x00\x00" * formats
    body += struct.pack("!H", len(values))
    body += b"".join(struct.pack("!i", len(v)) + v for v in values)
    return _frame(b"B", body + struct.pack("!H", 0))


def test_counts_are_unsigned_16_bit() -> None:
    parse = messages.parse_frontend(b"P", _parse_many("select $1", MANY)[5:])
    assert isinstance(parse, messages.Parse) and len(parse.param_oids) == MANY
    values = [b"1"] * MANY
    bound = messages.parse_frontend(b"B", _bind_many(values, MANY)[5:])
    assert isinstance(bound, messages.Bind)
    assert (len(bound.params), len(bound.param_formats)) == (MANY, MANY)
    described = messages.split_backend(messages.parameter_description([23] * MANY))
    assert struct.unpack("!H", described[0][1][:2]) == (MANY,)
    # 65535 announced, nothing follows: a truncated message, not a negative count
    with pytest.raises(messages.ProtocolViolation, match="needs 4 bytes"):
        messages.parse_frontend(b"P", _c("") + _c("select 1") + b"\xff\xff")


def test_statement_with_40000_declared_parameters(database: Database) -> None:
    # As Postgres 15: declared parameters the statement does not use are accepted, described
    # and bound; the statement runs with the one it uses.
    handler = ConnectionHandler(database, UserStore({}), process_id=1, secret_key=2)
    handler.startup(messages.StartupMessage({"user": "u"}))
    try:
        stream = _parse_many("select $1::int + 1 as v", MANY) + describe("S") + SYNC
        got = run(handler, stream)
        assert [t for t, _ in got] == [b"1", b"t", b"T", b"Z"]
        assert struct.unpack("!H", got[1][1][:2]) == (MANY,)
        got = run(handler, _bind_many([b"41"] * MANY, 0) + execute() + SYNC)
        assert [t for t, _ in got] == [b"2", b"D", b"C", b"Z"]
        assert got[1][1].endswith(b"42")
        got = run(handler, bind([b"41"]) + SYNC)  # fewer values than declared
        fields = messages.parse_error_fields(got[0][1])
        assert fields["C"] == "08P01" and "supplies 1 parameters" in fields["M"]
    finally:
        handler.close()


def test_refused_admission_closes_before_any_session(database: Database) -> None:
    handler = ConnectionHandler(
        database, UserStore({}), process_id=1, secret_key=2, admit=lambda: False
    )
    got = messages.split_backend(b"".join(handler.startup(messages.StartupMessage({"user": "u"}))))
    assert [t for t, _ in got] == [b"E"]  # no AuthenticationOk
    fields = messages.parse_error_fields(got[0][1])
    assert (fields["S"], fields["C"], fields["M"]) == (
        "FATAL",
        "53300",
        "sorry, too many clients already",
    )
    assert handler.closed


def test_more_result_columns_than_postgres_allows_is_an_error(database: Database) -> None:
    # as Postgres (54011); a RowDescription could not count 40000 columns at all
    handler = ConnectionHandler(database, UserStore({}), process_id=1, secret_key=2)
    handler.startup(messages.StartupMessage({"user": "u"}))
    try:
        for n, described in ((1664, b"T"), (1665, b"E")):
            sql = "select " + ", ".join(f"{i} as c{i}" for i in range(n))
            got = run(handler, query(sql))
            assert got[0][0] == described
            got = run(handler, parse(sql) + describe("S") + SYNC)
            assert [t for t, _ in got] == [b"1", b"t", described, b"Z"]
        fields = messages.parse_error_fields(got[2][1])
        assert (fields["C"], fields["M"]) == ("54011", "target lists can have at most 1664 entries")
        assert run(handler, query("select 1"))[-1] == (b"Z", b"I")
    finally:
        handler.close()
