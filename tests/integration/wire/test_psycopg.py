"""psycopg 3 against the real server over TCP: parameters of every type in both protocols,
prepared statements, binary results, SQLSTATE errors, cancel, statement timeout, TLS, SCRAM."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.numeric import Float4, Int2, Int4, Int8

from streambed.server.database import LakeDatabase
from streambed.server.wire.server import QueryServer
from streambed.server.wire.tls import TlsMode
from tests.integration.wire.conftest import ITEM_ROWS, conninfo, start_server

PARIS = dt.timezone(dt.timedelta(hours=2))

# (value sent, expected back from `SELECT <param>`)
PARAMETERS: list[tuple[str, Any, Any]] = [
    ("text", "hello 'quoted' \\ world", "hello 'quoted' \\ world"),
    ("text unicode", "h\u00e9llo \u2603", "h\u00e9llo \u2603"),
    ("int2", Int2(-12), -12),
    ("int4", Int4(2**31 - 1), 2**31 - 1),
    ("int8", Int8(-(2**62)), -(2**62)),
    ("python int", 42, 42),
    ("numeric", Decimal("12345.678900"), Decimal("12345.678900")),
    ("float4", Float4(0.5), 0.5),
    ("float8", 1.25e100, 1.25e100),
    ("bool", True, True),
    ("date", dt.date(2024, 2, 29), dt.date(2024, 2, 29)),
    (
        "timestamp",
        dt.datetime(2024, 1, 2, 3, 4, 5, 678900),
        dt.datetime(2024, 1, 2, 3, 4, 5, 678900),
    ),
    (
        "timestamptz",
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=PARIS),
        dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=dt.UTC),
    ),
    (
        "uuid",
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ),
    ("bytea", b"\x00\x01\xfe\xff'", b"\x00\x01\xfe\xff'"),
    ("null", None, None),
]


@pytest.fixture(scope="module")
def conn(server: QueryServer) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        yield c


@pytest.mark.parametrize("protocol", ["extended", "simple"])
@pytest.mark.parametrize(
    ("value", "expected"), [p[1:] for p in PARAMETERS], ids=[p[0] for p in PARAMETERS]
)
def test_parameter_round_trip(
    conn: psycopg.Connection[tuple[Any, ...]],
    protocol: str,
    value: Any,
    expected: Any,
) -> None:
    cursor_class = psycopg.ClientCursor if protocol == "simple" else psycopg.Cursor
    with cursor_class(conn) as cur:
        (got,) = cur.execute("SELECT %s AS v", [value]).fetchone() or (object(),)
    assert got == expected
    # psycopg renders floats as bare literals client-side, which SQL types as numeric (as
    # Postgres does); every other type must come back as the same Python type.
    if expected is not None and not (protocol == "simple" and isinstance(expected, float)):
        assert type(got) is type(expected)


@pytest.mark.parametrize("protocol", ["extended", "simple"])
@pytest.mark.parametrize(
    ("where", "value", "count"),
    [
        ("id = %s", 5, 1),
        ("name = %s", "item 5", 1),
        ("price >= %s", Decimal("19.99"), ITEM_ROWS - 1998),
        ("qty = %s", Int2(3), ITEM_ROWS // 50),
        ("ratio > %s", 249.0, ITEM_ROWS - 1992),
        ("active = %s", False, ITEM_ROWS // 2),
        ("day = %s", dt.date(2024, 1, 5), 6),
        ("day = %s", "2024-01-05", 6),  # untyped string, cast by DuckDB from the column
        ("seen < %s", dt.datetime(2024, 1, 1, 12, 10), 9),
        ("created_at < %s", dt.datetime(2024, 1, 1, 15, 30, tzinfo=dt.UTC), 3),
        ("payload = %s", b"\x05\x00\xff", 8),
        ("name is not distinct from %s", None, ITEM_ROWS // 7),
    ],
)
def test_parameters_against_columns(
    conn: psycopg.Connection[tuple[Any, ...]],
    protocol: str,
    where: str,
    value: Any,
    count: int,
) -> None:
    cursor_class = psycopg.ClientCursor if protocol == "simple" else psycopg.Cursor
    with cursor_class(conn) as cur:
        row = cur.execute(f"SELECT count(*) FROM public.items WHERE {where}", [value]).fetchone()
    assert row == (count,)


def test_count_is_named_count_and_results_are_not_capped(
    conn: psycopg.Connection[tuple[Any, ...]],
) -> None:
    cur = conn.execute("SELECT count(*) FROM public.items")
    assert cur.description is not None and cur.description[0].name == "count"
    rows = conn.execute("SELECT i FROM range(300000) t(i)").fetchall()
    assert len(rows) == 300000 and rows[-1] == (299999,)


def test_prepared_statements(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    for i in range(1, 8):
        row = conn.execute(
            "SELECT id, name FROM public.items WHERE id = %s", [i], prepare=True
        ).fetchone()
        assert row == (i, None if i % 7 == 0 else f"item {i}")
    with conn.cursor() as cur:
        cur.executemany("SELECT %s::int + 1", [(1,), (2,), (3,)])


def test_binary_results_match_text_results(server: QueryServer) -> None:
    query = "SELECT * FROM public.items ORDER BY id"
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        text_rows = c.execute(query).fetchall()
        with c.cursor(binary=True) as cur:
            binary_rows = cur.execute(query).fetchall()
        extra = (
            "SELECT 1.5::decimal(38,10), -0.001::decimal(5,3), interval '1 day 2 hours', "
            "time '01:02:03.5', gen_random_uuid() IS NOT NULL, ARRAY[1, 2], ARRAY['a', NULL]"
        )
        text_extra = c.execute(extra).fetchone()
        with c.cursor(binary=True) as cur:
            binary_extra = cur.execute(extra).fetchone()
    assert len(binary_rows) == ITEM_ROWS
    assert binary_rows == text_rows
    assert binary_extra == text_extra


@pytest.mark.parametrize("binary", [False, True])
def test_exact_avg_and_sum_types_as_postgres_sends_them(server: QueryServer, binary: bool) -> None:
    query = (
        "SELECT avg(x), sum(x), count(x), 1 / 30000000.0, sum(x) / 2.0 "
        "FROM (VALUES (1), (1), (2)) v(x)"
    )
    with (
        psycopg.connect(conninfo(server), autocommit=True) as c,
        c.cursor(binary=binary) as cur,
    ):
        row = cur.execute(query).fetchone()
        description = cur.description
    assert description is not None
    # Postgres: numeric without typmod, bigint, bigint, numeric, numeric
    assert [(d.type_code, d.precision, d.scale) for d in description] == [
        (1700, None, None), (20, None, None), (20, None, None), (1700, None, None),
        (1700, None, None),
    ]  # fmt: skip
    assert row is not None
    assert [str(v) for v in row] == [
        "1.3333333333333333", "4", "3", "3.3333333333333333E-8", "2.0000000000000000",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("sql", "error", "sqlstate"),
    [
        ("SELECT * FROM missing_table", errors.UndefinedTable, "42P01"),
        ("SELECT nope FROM public.items", errors.UndefinedColumn, "42703"),
        ("SELEC 1", errors.SyntaxError, "42601"),
        ("SELECT 1/0", errors.DivisionByZero, "22012"),
        ("SELECT 'x'::int", errors.InvalidTextRepresentation, "22P02"),
    ],
)
def test_errors_carry_sqlstate_and_leave_the_connection_usable(
    conn: psycopg.Connection[tuple[Any, ...]],
    sql: str,
    error: type[psycopg.Error] | None,
    sqlstate: str | None,
) -> None:
    try:
        conn.execute(sql)
    except psycopg.Error as e:
        assert error is not None and isinstance(e, error)
        assert e.sqlstate == sqlstate
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_failed_transaction_then_rollback(server: QueryServer) -> None:
    with psycopg.connect(conninfo(server)) as c:  # not autocommit: psycopg sends BEGIN
        c.execute("SELECT 1")
        statuses = [c.info.transaction_status]
        with pytest.raises(errors.UndefinedTable):
            c.execute("SELECT * FROM missing_table")
        statuses.append(c.info.transaction_status)
        assert statuses == [
            psycopg.pq.TransactionStatus.INTRANS,
            psycopg.pq.TransactionStatus.INERROR,
        ]
        with pytest.raises(errors.InFailedSqlTransaction):
            c.execute("SELECT 1")
        c.rollback()
        assert c.execute("SELECT 2").fetchone() == (2,)


def test_multiple_statements_in_one_simple_query(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    with psycopg.ClientCursor(conn) as cur:
        cur.execute("SELECT 1 AS a; SELECT 2 AS b, 3 AS c")
        assert cur.fetchall() == [(1,)]
        assert cur.nextset()
        assert cur.fetchall() == [(2, 3)]


def test_set_timezone_reports_parameter_status(server: QueryServer) -> None:
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        assert c.info.parameter_status("TimeZone") == "UTC"
        assert (
            c.info.parameter_status(
                "server_version",
            )
            is not None
        )
        c.execute("SET TimeZone = 'Europe/Paris'")
        assert c.info.parameter_status("TimeZone") == "Europe/Paris"
        (value,) = c.execute("SELECT created_at FROM public.items WHERE id = 1").fetchone() or ()
        assert value == dt.datetime(2024, 1, 1, 13, 0, tzinfo=dt.UTC)
        assert value.utcoffset() == dt.timedelta(hours=1)


LONG_QUERY = "SELECT count(*) FROM range(100000000000) a"


def test_cancel_stops_a_long_query(server: QueryServer) -> None:
    # cancel_safe, not cancel: libpq's blocking PQcancel holds the GIL while it waits for the
    # server to close the cancel connection, and here the server runs in the same process.
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        timer = threading.Timer(0.5, c.cancel_safe)
        timer.start()
        started = time.monotonic()
        with pytest.raises(errors.QueryCanceled, match="user request"):
            c.execute(LONG_QUERY)
        timer.join()
        assert time.monotonic() - started < 10
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_statement_timeout(server: QueryServer) -> None:
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        c.execute("SET statement_timeout = '500ms'")
        with pytest.raises(errors.QueryCanceled, match="statement timeout"):
            c.execute(LONG_QUERY)
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_scram_accepts_and_rejects(server: QueryServer) -> None:
    with psycopg.connect(conninfo(server)) as c:
        assert c.execute("SELECT current_user").fetchone() is not None
    messages = []
    for user, password in [("alice", "wrong"), ("nobody", "s3cret-pw"), ("bob", "s3cret-pw")]:
        with pytest.raises(psycopg.OperationalError) as caught:
            psycopg.connect(conninfo(server, user=user, password=password))
        messages.append(str(caught.value).replace(f'"{user}"', '"<user>"'))
    assert all("password authentication failed" in m for m in messages)
    assert len(set(messages)) == 1, messages


def test_tls(lake_database: LakeDatabase, tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    srv = start_server(lake_database, tls_cert=cert, tls_key=key, tls=TlsMode.ON)
    strict = start_server(
        lake_database, tls_cert=cert, tls_key=key, tls=TlsMode.REQUIRE, users="alice:pw"
    )
    try:
        with psycopg.connect(conninfo(srv, sslmode="require")) as c:
            assert c.pgconn.ssl_in_use
            assert c.execute("SELECT count(*) FROM public.items").fetchone() == (ITEM_ROWS,)
        with psycopg.connect(
            conninfo(srv, sslmode="verify-full", sslrootcert=str(cert), host="localhost")
        ) as c:
            assert c.pgconn.ssl_in_use
        with psycopg.connect(conninfo(srv, sslmode="disable")) as c:  # TLS on: plaintext allowed
            assert not c.pgconn.ssl_in_use
        with psycopg.connect(conninfo(strict, password="pw", sslmode="require")) as c:
            assert c.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError, match="TLS is required"):
            psycopg.connect(conninfo(strict, password="pw", sslmode="disable"))
    finally:
        srv.stop()
        strict.stop()


def test_connection_limit(lake_database: LakeDatabase) -> None:
    srv = start_server(lake_database, max_connections=2)
    try:
        with (
            psycopg.connect(conninfo(srv)),
            psycopg.connect(conninfo(srv)),
            pytest.raises(psycopg.OperationalError, match="too many clients"),
        ):
            psycopg.connect(conninfo(srv))
        # the server frees a slot when it has read the client's Terminate (as Postgres does)
        deadline = time.monotonic() + 5
        while srv.connection_count and time.monotonic() < deadline:
            time.sleep(0.01)
        with psycopg.connect(conninfo(srv)) as c:  # a slot is free again
            assert c.execute("SELECT 1").fetchone() == (1,)
    finally:
        srv.stop()


@pytest.mark.parametrize("binary", [False, True])
def test_server_side_named_cursor(server: QueryServer, binary: bool) -> None:
    # conn.cursor(name=...): DECLARE in the transaction, Describe of the cursor's portal,
    # FETCH FORWARD itersize at a time, CLOSE
    with psycopg.connect(conninfo(server)) as c:
        with c.cursor(name="items_cur", binary=binary) as cur:
            cur.itersize = 300
            cur.execute("SELECT id, name, price FROM public.items WHERE id > %s ORDER BY id", [5])
            assert [d.name for d in cur.description or ()] == ["id", "name", "price"]
            assert cur.fetchone() == (6, "item 6", Decimal("0.06"))
            assert len(cur.fetchmany(10)) == 10
            ids = [row[0] for row in cur]
            assert ids == list(range(17, ITEM_ROWS + 1))
        c.commit()
        with c.cursor(name="again") as cur:
            cur.execute("SELECT count(*) FROM public.items")
            assert cur.fetchall() == [(ITEM_ROWS,)]
        c.rollback()


def test_cursor_statements_and_tags(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    conn.execute("BEGIN")
    try:
        cur = conn.execute("DECLARE c CURSOR FOR SELECT id FROM public.items ORDER BY id")
        assert cur.statusmessage == "DECLARE CURSOR"
        cur = conn.execute("FETCH 3 FROM c")
        assert cur.statusmessage == "FETCH 3" and cur.fetchall() == [(1,), (2,), (3,)]
        assert conn.execute("MOVE 10 c").statusmessage == "MOVE 10"
        assert conn.execute("FETCH NEXT c").fetchall() == [(14,)]
        assert conn.execute("CLOSE c").statusmessage == "CLOSE CURSOR"
        conn.execute("DECLARE c2 CURSOR FOR SELECT 1")
        with pytest.raises(errors.ObjectNotInPrerequisiteState):  # 55000: forward only
            conn.execute("FETCH BACKWARD 1 c2")
    finally:
        conn.execute("ROLLBACK")
    with pytest.raises(errors.NoActiveSqlTransaction):  # 25P01 outside a block
        conn.execute("DECLARE d CURSOR FOR SELECT 1")


def test_session_timezone_computes_timestamptz(server: QueryServer) -> None:
    # Postgres 15 in Europe/Berlin: item 11 was created 2024-01-01 23:00 UTC = 00:00 on the 2nd
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        c.execute("SET TimeZone = 'Europe/Berlin'")
        row = c.execute(
            "SELECT date_trunc('day', created_at), created_at::date, "
            "extract(hour FROM created_at), created_at::text FROM public.items WHERE id = 11"
        ).fetchone()
        berlin = dt.timezone(dt.timedelta(hours=1))
        # (extract is numeric on Postgres 14+, bigint here: equal values)
        assert row == (
            dt.datetime(2024, 1, 2, tzinfo=berlin),
            dt.date(2024, 1, 2),
            0,
            "2024-01-02 00:00:00+01",
        )
        (count,) = (
            c.execute(
                "SELECT count(*) FROM public.items WHERE created_at::date = DATE '2024-01-02'"
            ).fetchone()
            or ()
        )
        assert count == 24  # ids 11..34 fall on 2 January in Berlin
