"""The protocol handler without sockets: raw frontend message bytes in, backend messages out.

Each case is a list of frontend messages (as the bytes a client sends) and the expected
backend messages as (type, check) pairs. Checks compare the fields that matter: command tags,
SQLSTATEs, type OIDs, row values, transaction status.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from streambed.server.wire import messages
from streambed.server.wire.auth import UserStore
from streambed.server.wire.handler import ConnectionHandler, Database

# ---- frontend message bytes ---------------------------------------------------------------


def _frame(type_code: bytes, body: bytes) -> bytes:
    return type_code + struct.pack("!i", len(body) + 4) + body


def _c(text: str) -> bytes:
    return text.encode() + b"\x00"


def query(sql: str) -> bytes:
    return _frame(b"Q", _c(sql))


def parse(sql: str, oids: Sequence[int] = (), name: str = "") -> bytes:
    body = _c(name) + _c(sql) + struct.pack("!h", len(oids))
    return _frame(b"P", body + b"".join(struct.pack("!I", o) for o in oids))


def bind(
    values: Sequence[bytes | None] = (),
    formats: Sequence[int] = (),
    result_formats: Sequence[int] = (),
    statement: str = "",
    portal: str = "",
) -> bytes:
    body = _c(portal) + _c(statement)
    body += struct.pack("!h", len(formats)) + b"".join(struct.pack("!h", f) for f in formats)
    body += struct.pack("!h", len(values))
    for v in values:
        body += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v
    body += struct.pack("!h", len(result_formats))
    body += b"".join(struct.pack("!h", f) for f in result_formats)
    return _frame(b"B", body)


def describe(kind: str, name: str = "") -> bytes:
    return _frame(b"D", kind.encode() + _c(name))


def execute(portal: str = "", max_rows: int = 0) -> bytes:
    return _frame(b"E", _c(portal) + struct.pack("!i", max_rows))


def close(kind: str, name: str = "") -> bytes:
    return _frame(b"C", kind.encode() + _c(name))


SYNC = _frame(b"S", b"")
FLUSH = _frame(b"H", b"")


# ---- backend message checks ----------------------------------------------------------------


def row_description(body: bytes) -> list[tuple[str, int, int, int]]:
    r = messages.Reader(body, "RowDescription")
    out = []
    for _ in range(r.int16()):
        name = r.cstring()
        r.int32(), r.int16()
        oid, _typlen, typmod, fmt = r.int32(), r.int16(), r.int32(), r.int16()
        out.append((name, oid, typmod, fmt))
    return out


def data_row(body: bytes) -> list[bytes | None]:
    r = messages.Reader(body, "DataRow")
    values: list[bytes | None] = []
    for _ in range(r.int16()):
        n = r.int32()
        values.append(None if n == -1 else r.raw(n))
    return values


Check = Callable[[bytes], Any]


@dataclass(frozen=True)
class Expect:
    type_code: bytes
    check: Check | None = None
    equals: Any = None


def T(*columns: tuple[str, int]) -> Expect:
    return Expect(b"T", lambda b: [(n, o) for n, o, _, _ in row_description(b)], list(columns))


def D(*values: bytes | None) -> Expect:
    return Expect(b"D", data_row, list(values))


def C(tag: str) -> Expect:
    return Expect(b"C", lambda b: b[:-1].decode(), tag)


def E(sqlstate: str) -> Expect:
    return Expect(b"E", lambda b: messages.parse_error_fields(b)["C"], sqlstate)


def _error_at(body: bytes) -> tuple[str | None, str | None, str | None]:
    fields = messages.parse_error_fields(body)
    return fields.get("C"), fields.get("M"), fields.get("P")


def Z(status: str) -> Expect:
    return Expect(b"Z", lambda b: b.decode(), status)


def just(type_code: str) -> Expect:
    return Expect(type_code.encode())


INT4, INT8, TEXT, NUMERIC = 23, 20, 25, 1700


def run(handler: ConnectionHandler, stream: bytes) -> list[tuple[bytes, bytes]]:
    out: list[bytes] = []
    for type_code, body in messages.split_backend(stream):
        out.extend(handler.handle(type_code, body))
    return messages.split_backend(b"".join(out))


def assert_messages(got: list[tuple[bytes, bytes]], expected: Sequence[Expect]) -> None:
    assert [t for t, _ in got] == [e.type_code for e in expected], got
    for (_, body), e in zip(got, expected, strict=True):
        if e.check is not None:
            assert e.check(body) == e.equals


def ready_handler(database: Database) -> ConnectionHandler:
    handler = ConnectionHandler(database, UserStore({}), process_id=7, secret_key=9)
    startup = messages.split_backend(
        b"".join(handler.startup(messages.StartupMessage({"user": "alice"})))
    )
    assert startup[-1] == (b"Z", b"I")
    return handler


CASES: list[tuple[str, bytes, list[Expect]]] = [
    (
        "simple select",
        query("select 1 as a, 'x' as b"),
        [T(("a", INT4), ("b", TEXT)), D(b"1", b"x"), C("SELECT 1"), Z("I")],
    ),
    ("empty query", query("  ;  "), [just("I"), Z("I")]),
    ("comment only", query("-- nothing"), [just("I"), Z("I")]),
    (
        "two statements in one Query",
        query("select 1 as a; select 2::bigint as b"),
        [T(("a", INT4)), D(b"1"), C("SELECT 1"), T(("b", INT8)), D(b"2"), C("SELECT 1"), Z("I")],
    ),
    (
        "an error stops the rest of a multi-statement Query",
        query("select 1 as a; select * from nope; select 3"),
        [T(("a", INT4)), D(b"1"), C("SELECT 1"), E("42P01"), Z("I")],
    ),
    (
        # Postgres parses the whole Query string first: a syntax error anywhere runs nothing
        "a syntax error in a multi-statement Query runs none of it",
        query("select 1 as a; SELEC 2; select 3"),
        [Expect(b"E", _error_at, ("42601", 'syntax error at or near "SELEC"', "16")), Z("I")],
    ),
    ("DuckDB-only statements are syntax errors", query("DESCRIBE t"), [E("42601"), Z("I")]),
    ("INSTALL is a syntax error", query("install httpfs"), [E("42601"), Z("I")]),
    ("PRAGMA is a syntax error", query("pragma threads = 1"), [E("42601"), Z("I")]),
    (
        "a refused function stops the rest of a multi-statement Query",
        query("select 1 as a; select * from pandas_scan(NULL); select 3"),
        [T(("a", INT4)), D(b"1"), C("SELECT 1"), E("42501"), Z("I")],
    ),
    (
        "a syntax error fails the open transaction block",
        query("begin") + query("SELEC 1") + query("select 1") + query("rollback"),
        [C("BEGIN"), Z("T"), E("42601"), Z("E"), E("25P02"), Z("E"), C("ROLLBACK"), Z("I")],
    ),
    (
        "a syntax error in Parse is answered at Execute, with its position",
        parse("select 1 from t where x = = 1") + bind() + execute() + SYNC,
        [
            just("1"),
            just("2"),
            Expect(b"E", _error_at, ("42601", 'syntax error at or near "="', "27")),
            Z("I"),
        ],
    ),
    (
        "count(*) keeps rows streaming without a cap",
        query("select count(*) as count from range(250000)"),
        [T(("count", INT8)), D(b"250000"), C("SELECT 1"), Z("I")],
    ),
    (
        "NULL and numeric scale",
        query("select null::int as n, 1.50::decimal(5,2) as d"),
        [T(("n", INT4), ("d", NUMERIC)), D(None, b"1.50"), C("SELECT 1"), Z("I")],
    ),
    (
        "extended: parse, bind, describe portal, execute, sync",
        parse("select $1::int + 1 as x", [INT4]) + bind([b"41"]) + describe("P") + execute() + SYNC,
        [just("1"), just("2"), T(("x", INT4)), D(b"42"), C("SELECT 1"), Z("I")],
    ),
    (
        "untyped text parameter cast by DuckDB from its usage",
        parse("select * from range(10) t(i) where i = $1", [0]) + bind([b"3"]) + execute() + SYNC,
        [just("1"), just("2"), D(b"3"), C("SELECT 1"), Z("I")],
    ),
    (
        "untyped parameter in an open context is retried with its literal's type",
        parse("select $1 + 1 as x") + bind([b"4"]) + execute() + SYNC,
        [just("1"), just("2"), D(b"5"), C("SELECT 1"), Z("I")],
    ),
    (
        "max rows: PortalSuspended, then resume to the end",
        parse("select * from range(5)")
        + bind()
        + execute(max_rows=2)
        + execute(max_rows=2)
        + execute(max_rows=2)
        + SYNC,
        [
            just("1"),
            just("2"),
            D(b"0"),
            D(b"1"),
            just("s"),
            D(b"2"),
            D(b"3"),
            just("s"),
            D(b"4"),
            C("SELECT 1"),
            Z("I"),
        ],
    ),
    (
        "a portal ending exactly at max rows completes instead of suspending",
        parse("select * from range(2)") + bind() + execute(max_rows=2) + SYNC,
        [just("1"), just("2"), D(b"0"), D(b"1"), C("SELECT 2"), Z("I")],
    ),
    (
        "error: ignore everything until Sync, then ready again",
        parse("select * from nope")
        + bind()
        + execute()
        + SYNC
        + parse("select 1 as a")
        + bind()
        + execute()
        + SYNC,
        [
            just("1"),
            just("2"),
            E("42P01"),
            Z("I"),
            just("1"),
            just("2"),
            D(b"1"),
            C("SELECT 1"),
            Z("I"),
        ],
    ),
    (
        "describe statement: parameter types and columns without running it",
        parse("select $1::int as x, $2::varchar as y", [INT4, 0], name="s1")
        + describe("S", "s1")
        + SYNC,
        [
            just("1"),
            Expect(b"t", lambda b: struct.unpack("!hII", b), (2, INT4, TEXT)),
            T(("x", INT4), ("y", TEXT)),
            Z("I"),
        ],
    ),
    (
        "describe of a statement without rows: NoData",
        parse("set threads = 2", name="s2") + describe("S", "s2") + SYNC,
        [just("1"), Expect(b"t", lambda b: b, b"\x00\x00"), just("n"), Z("I")],
    ),
    (
        "named statement bound twice, then closed",
        parse("select $1::bigint * 2 as d", [INT8], name="dbl")
        + bind([b"2"], statement="dbl")
        + execute()
        + bind([struct.pack("!q", 5)], formats=[1], statement="dbl", result_formats=[1])
        + execute()
        + close("S", "dbl")
        + bind([b"2"], statement="dbl")
        + SYNC,
        [
            just("1"),
            just("2"),
            D(b"4"),
            C("SELECT 1"),
            just("2"),
            D(struct.pack("!q", 10)),
            C("SELECT 1"),
            just("3"),
            E("26000"),
            Z("I"),
        ],
    ),
    (
        "duplicate named statement",
        parse("select 1", name="a") + parse("select 2", name="a") + SYNC,
        [just("1"), E("42P05"), Z("I")],
    ),
    (
        "multiple commands cannot be prepared",
        parse("select 1; select 2") + SYNC,
        [E("42601"), Z("I")],
    ),
    (
        "bad parameter value: 22P02, connection usable",
        parse("select $1::int", [INT4]) + bind([b"x1"]) + execute() + SYNC + query("select 1 as a"),
        [just("1"), E("22P02"), Z("I"), T(("a", INT4)), D(b"1"), C("SELECT 1"), Z("I")],
    ),
    (
        "unknown portal",
        execute("nope") + SYNC,
        [E("34000"), Z("I")],
    ),
    (
        "empty statement in the extended protocol",
        parse("") + bind() + describe("P") + execute() + SYNC,
        [just("1"), just("2"), just("n"), just("I"), Z("I")],
    ),
    (
        "Flush answers nothing by itself",
        parse("select 1") + FLUSH,
        [just("1")],
    ),
    (
        "transaction block: T, then E after an error, 25P02, ROLLBACK back to I",
        query("begin")
        + query("select 1 as a")
        + query("select * from nope")
        + query("select 1")
        + query("rollback"),
        [
            C("BEGIN"),
            Z("T"),
            T(("a", INT4)),
            D(b"1"),
            C("SELECT 1"),
            Z("T"),
            E("42P01"),
            Z("E"),
            E("25P02"),
            Z("E"),
            C("ROLLBACK"),
            Z("I"),
        ],
    ),
    (
        "COMMIT of a failed transaction rolls back",
        query("begin") + query("select nope") + query("commit"),
        [C("BEGIN"), Z("T"), E("42703"), Z("E"), C("ROLLBACK"), Z("I")],
    ),
    (
        "transaction statements are recognised by parsing, not by substring",
        query("select 'begin' as begin_at"),
        [T(("begin_at", TEXT)), D(b"begin"), C("SELECT 1"), Z("I")],
    ),
    (
        "COMMIT without a transaction: still I",
        query("commit"),
        [C("COMMIT"), Z("I")],
    ),
    (
        "SET of a reported setting sends ParameterStatus",
        query("set TimeZone = 'Europe/Paris'"),
        [
            Expect(b"S", lambda b: b.split(b"\x00")[:2], [b"TimeZone", b"Europe/Paris"]),
            C("SET"),
            Z("I"),
        ],
    ),
    (
        "SQL cursor: DECLARE, Describe of the cursor's portal, FETCH in pieces, CLOSE",
        query("begin")
        + parse("declare cur cursor for select i from range($1::int) t(i)", [INT4])
        + bind([b"3"])
        + execute()
        + describe("P", "cur")
        + SYNC
        + query("fetch 2 from cur")
        + query("fetch forward all from cur; close cur")
        + query("commit"),
        [
            C("BEGIN"),
            Z("T"),
            just("1"),
            just("2"),
            C("DECLARE CURSOR"),
            T(("i", INT8)),
            Z("T"),
            T(("i", INT8)),
            D(b"0"),
            D(b"1"),
            C("FETCH 2"),
            Z("T"),
            T(("i", INT8)),
            D(b"2"),
            C("FETCH 1"),
            C("CLOSE CURSOR"),
            Z("T"),
            C("COMMIT"),
            Z("I"),
        ],
    ),
    (
        "binary results per the Bind result format codes",
        parse("select 1::int as a, 'x' as b, true as c, date '2000-01-02' as d")
        + bind(result_formats=[1])
        + execute()
        + SYNC,
        [
            just("1"),
            just("2"),
            D(b"\x00\x00\x00\x01", b"x", b"\x01", b"\x00\x00\x00\x01"),
            C("SELECT 1"),
            Z("I"),
        ],
    ),
]


@pytest.mark.parametrize(("stream", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_protocol(database: Database, stream: bytes, expected: list[Expect]) -> None:
    handler = ready_handler(database)
    try:
        assert_messages(run(handler, stream), expected)
    finally:
        handler.close()


@pytest.mark.parametrize(
    "stream",
    [
        _frame(b"Y", b""),  # unknown message type
        _frame(b"B", b"\x00\x00\x00"),  # truncated Bind
        _frame(b"Q", b"select 1"),  # unterminated string
        _frame(b"P", _c("") + _c("select 1") + struct.pack("!h", -1)),  # 65535 types, none sent
        _frame(b"E", _c("") + b"\x00"),  # short int32
        _frame(b"D", b"X" + _c("")),  # bad describe target
        _frame(b"p", b"password"),  # password after authentication
    ],
)
def test_malformed_message_closes_the_connection(database: Database, stream: bytes) -> None:
    handler = ready_handler(database)
    got = run(handler, stream)
    assert [t for t, _ in got] == [b"E"]
    fields = messages.parse_error_fields(got[0][1])
    assert (fields["S"], fields["C"]) == ("FATAL", "08P01")
    assert handler.closed


def test_startup_sends_parameter_status_and_key_data(database: Database) -> None:
    handler = ConnectionHandler(database, UserStore({}), process_id=7, secret_key=9)
    startup = messages.StartupMessage({"user": "u", "application_name": "psql"})
    got = messages.split_backend(b"".join(handler.startup(startup)))
    assert got[0] == (b"R", struct.pack("!i", 0))
    status: dict[bytes, bytes] = {}
    for type_code, body in got:
        if type_code == b"S":
            name, value = body.split(b"\x00")[:2]
            status[name] = value
    assert status[b"server_version"].startswith(b"15.")
    assert status[b"application_name"] == b"psql"
    for name, value in [
        (b"server_encoding", b"UTF8"),
        (b"client_encoding", b"UTF8"),
        (b"DateStyle", b"ISO, MDY"),
        (b"TimeZone", b"UTC"),
        (b"integer_datetimes", b"on"),
        (b"standard_conforming_strings", b"on"),
    ]:
        assert status[name] == value
    assert (b"K", struct.pack("!II", 7, 9)) in got
    assert got[-1] == (b"Z", b"I")
    handler.close()


# ---- SCRAM through the handler --------------------------------------------------------------


def _sasl_initial(client_first: bytes) -> bytes:
    return _frame(b"p", _c("SCRAM-SHA-256") + struct.pack("!i", len(client_first)) + client_first)


def _client_final(password: str, client_first_bare: str, server_first: str) -> str:
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    stored = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored, auth_message, "sha256")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def _login(database: Database, user: str, password: str) -> tuple[ConnectionHandler, list[bytes]]:
    handler = ConnectionHandler(
        database, UserStore.from_passwords("alice:s3cret"), process_id=1, secret_key=2
    )
    got = messages.split_backend(b"".join(handler.startup(messages.StartupMessage({"user": user}))))
    assert got == [(b"R", struct.pack("!i", 10) + b"SCRAM-SHA-256\x00\x00")]
    bare = "n=,r=clientnonce123"
    answer = run(handler, _sasl_initial(("n,," + bare).encode()))
    assert [t for t, _ in answer] == [b"R"]
    code, server_first = struct.unpack("!i", answer[0][1][:4])[0], answer[0][1][4:].decode()
    assert code == 11
    final = run(handler, _frame(b"p", _client_final(password, bare, server_first).encode()))
    return handler, [t + b for t, b in final]


def test_scram_accepts_the_right_password(database: Database) -> None:
    handler, got = _login(database, "alice", "s3cret")
    assert got[0].startswith(b"R" + struct.pack("!i", 12) + b"v=")
    assert got[1] == b"R" + struct.pack("!i", 0)
    assert got[-1] == b"ZI"
    handler.close()


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "s3cret")])
def test_scram_rejects_wrong_password_and_unknown_user_alike(
    database: Database, user: str, password: str
) -> None:
    handler, got = _login(database, user, password)
    assert len(got) == 1 and got[0][:1] == b"E"
    fields = messages.parse_error_fields(got[0][1:])
    assert fields["C"] == "28P01" and fields["S"] == "FATAL"
    assert fields["M"] == f'password authentication failed for user "{user}"'
    assert handler.closed


def test_cancel_stops_a_running_query(database: Database) -> None:
    handler = ready_handler(database)
    answers = handler.handle(b"Q", _c("select count(*) from range(100000000000)"))
    import threading

    timer = threading.Timer(0.3, handler.cancel)
    timer.start()
    got = messages.split_backend(b"".join(answers))
    timer.join()
    assert [t for t, _ in got][-2:] == [b"E", b"Z"]
    fields = messages.parse_error_fields(got[-2][1])
    assert fields["C"] == "57014"
    assert fields["M"] == "canceling statement due to user request"
    assert_messages(
        run(handler, query("select 1 as a")), [T(("a", INT4)), D(b"1"), C("SELECT 1"), Z("I")]
    )
    handler.close()


def test_statement_timeout(database: Database) -> None:
    handler = ready_handler(database)
    assert_messages(run(handler, query("SET statement_timeout = 300")), [C("SET"), Z("I")])
    got = run(handler, query("select count(*) from range(100000000000)"))
    fields = messages.parse_error_fields(got[-2][1])
    assert fields["C"] == "57014"
    assert fields["M"] == "canceling statement due to statement timeout"
    handler.close()
