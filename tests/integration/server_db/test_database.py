"""LakeDatabase against real Iceberg tables: SQL in, columns, type OIDs and rows out."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from pyiceberg.types import StringType

from streambed.server import catalog
from streambed.server.database import DatabaseSettings, LakeDatabase, QueryError

from .conftest import FakeSnapshots, Lake, lines_rows, orders_rows

D = decimal.Decimal
TS = dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)

# (sql, params, expected [(column name, type oid)], expected rows, command tag)
CASES: list[tuple[str, list[Any] | None, list[tuple[str, int]], list[tuple[Any, ...]], str]] = [
    ("SELECT count(*) FROM orders", None, [("count", 20)], [(3,)], "SELECT 1"),
    ("SELECT 1::int, 'x'::text, 1.5::numeric(4,2)", None,
     [("int4", 23), ("text", 25), ("numeric", 1700)], [(1, "x", D("1.50"))], "SELECT 1"),
    ("SELECT id, customer, amount, created_at FROM public.orders ORDER BY id", None,
     [("id", 23), ("customer", 25), ("amount", 1700), ("created_at", 1184)],
     [(1, "c1", D("1.50"), TS), (2, "c0", None, TS), (3, None, D("3.50"), TS)], "SELECT 3"),
    ("SELECT o.id, sum(l.qty) AS total FROM orders o JOIN sales.order_lines l "
     "ON l.order_id = o.id GROUP BY o.id ORDER BY o.id", None,
     [("id", 23), ("total", 1700)], [(1, D(23)), (2, D(21))], "SELECT 2"),
    ("SELECT id, row_number() OVER (ORDER BY id DESC) FROM orders ORDER BY id", None,
     [("id", 23), ("row_number", 20)], [(1, 3), (2, 2), (3, 1)], "SELECT 3"),
    ("SELECT * FROM orders WHERE id = $1", [2], [("id", 23), ("customer", 25), ("amount", 1700),
     ("created_at", 1184)], [(2, "c0", None, TS)], "SELECT 1"),
    ("SELECT name FROM sales.customers WHERE code = $1", ["a"], [("name", 25)], [("Alice",)],
     "SELECT 1"),
    ("SELECT ARRAY[1, NULL]::INTEGER[] AS a, true AS b, DATE '2024-01-02' AS d", None,
     [("a", 1007), ("b", 16), ("d", 1082)], [([1, None], True, dt.date(2024, 1, 2))], "SELECT 1"),
    ("SELECT CASE WHEN true THEN 1 END, coalesce(NULL, 2), 1 + 1", None,
     [("case", 23), ("coalesce", 23), ("?column?", 23)], [(1, 2, 2)], "SELECT 1"),
    ("SELECT version() LIKE 'PostgreSQL 15.0 (streambed%'", None, [("?column?", 16)], [(True,)],
     "SELECT 1"),
    ("SELECT current_schema(), current_database(), current_user", None,
     [("current_schema", 25), ("current_database", 25), ("current_user", 25)],
     [("public", "streambed", "streambed")], "SELECT 1"),
    ("SHOW TimeZone", None, [("TimeZone", 25)], [("UTC",)], "SHOW"),
    ("SET application_name = 'psql'", None, [], [], "SET"),
    ("BEGIN", None, [], [], "BEGIN"),
    ("START TRANSACTION READ ONLY", None, [], [], "BEGIN"),
    ("COMMIT", None, [], [], "COMMIT"),
    ("ROLLBACK", None, [], [], "ROLLBACK"),
    # Postgres semantics DuckDB's defaults get wrong
    ("SELECT 7 / 2, -7 / 2, 7 % 3, 7.0 / 2, id / 2 FROM orders WHERE id = 3", None,
     [("?column?", 23), ("?column?", 23), ("?column?", 23), ("?column?", 1700),
      ("?column?", 23)], [(3, -3, 1, D("3.5"), 1)], "SELECT 1"),
    ("SELECT customer FROM orders ORDER BY customer", None, [("customer", 25)],
     [("c0",), ("c1",), (None,)], "SELECT 3"),
    ("SELECT customer FROM orders ORDER BY customer DESC", None, [("customer", 25)],
     [(None,), ("c1",), ("c0",)], "SELECT 3"),
    ("SELECT 'a' || customer, concat('a', customer) FROM orders WHERE id = 3", None,
     [("?column?", 25), ("concat", 25)],
     [(None, "a")], "SELECT 1"),
    ("SELECT '\\x0001ff'::bytea AS h, CAST('a\\\\b\\001' AS bytea) AS e", None,
     [("h", 17), ("e", 17)], [(b"\x00\x01\xff", b"a\\b\x01")], "SELECT 1"),
    ("SELECT extract(year FROM created_at) AS y, position('1' IN customer) AS p, "
     "substring(customer FROM 2 FOR 1) AS s, trim(both 'c' FROM customer) AS t, id % 2 AS m "
     "FROM orders WHERE id = 1", None,
     [("y", 1700), ("p", 20), ("s", 25), ("t", 25), ("m", 23)], [(2024, 2, "1", "1", 1)],
     "SELECT 1"),
    ("SELECT current_setting('TimeZone') AS a, current_setting($1) AS b", ["search_path"],
     [("a", 25), ("b", 25)], [("UTC", '"$user", public')], "SELECT 1"),
    # a parameter the rewrite resolves (a setting's name) before one it keeps
    ("SELECT current_setting($1) AS a, customer AS b FROM orders WHERE id = $2",
     ["TimeZone", 1], [("a", 25), ("b", 25)], [("UTC", "c1")], "SELECT 1"),
    ("SELECT to_regtype('int4') AS a, to_regtype('hstore') AS b", None,
     [("a", 20), ("b", 20)], [(23, None)], "SELECT 1"),
    ("SELECT (information_schema._pg_expandarray(ARRAY[5, 7])).n AS n, "
     "(information_schema._pg_expandarray(ARRAY[5, 7])).x AS x", None,
     [("n", 20), ("x", 23)], [(1, 5), (2, 7)], "SELECT 2"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "params", "columns", "rows", "tag"), CASES)
def test_handler_table(
    db: LakeDatabase,
    sql: str,
    params: list[Any] | None,
    columns: list[tuple[str, int]],
    rows: list[tuple[Any, ...]],
    tag: str,
) -> None:
    result = db.session().execute(sql, params)
    assert [(c.name, c.type_oid) for c in result.columns] == columns
    assert result.rows() == rows
    assert result.command_tag == tag


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        ("SELEC 1", "42601"),
        ("SELECT * FROM nope", "42P01"),
        ("SELECT nope FROM orders", "42703"),
        ("SELECT 'abc'::int", "22P02"),
        ("SHOW no_such_setting", "42704"),
        ("DECLARE c CURSOR FOR SELECT 1", "25P01"),  # outside a transaction block
        ("FETCH 10 FROM c", "34000"),
        ("CLOSE c", "34000"),
        ("SELECT 1 / 0", "22012"),
        ("SELECT 1 % 0", "22012"),
        ("SELECT 1.5 / 0", "22012"),
        ("SELECT 1.0::float8 / 0.0", "22012"),
        ("SELECT amount / (id - 1) FROM orders", "22012"),  # id 2: NULL / 0 is NULL
    ],
)
def test_errors_carry_sqlstate(db: LakeDatabase, sql: str, sqlstate: str) -> None:
    session = db.session()
    with pytest.raises(QueryError) as info:
        session.execute(sql).rows()
    assert info.value.sqlstate == sqlstate
    assert session.execute("SELECT 1").rows() == [(1,)]  # the session stays usable


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        ("COPY orders TO '/tmp/x.csv'", "25006"),
        ("ATTACH '/tmp/x.db' AS x", "42601"),  # DuckDB-only syntax: Postgres cannot parse it
        ("DETACH x", "42601"),
        ("INSTALL httpfs", "42601"),
        ("LOAD '/tmp/evil.duckdb_extension'", "25006"),
        ("EXPORT DATABASE '/tmp/out'", "42601"),
        ("IMPORT DATABASE '/tmp/out'", "42601"),
        ("CREATE TABLE t (a int)", "25006"),
        ("CREATE VIEW v AS SELECT 1", "25006"),
        ("INSERT INTO orders VALUES (9)", "25006"),
        ("UPDATE orders SET id = 1", "25006"),
        ("DELETE FROM orders", "25006"),
        ("DROP VIEW orders", "25006"),
        ("ALTER TABLE orders ADD COLUMN x int", "25006"),
        ("WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d", "25006"),
        ("SELECT * INTO t2 FROM orders", "25006"),
        ("PRAGMA database_list", "42601"),
        ("SELECT * FROM read_csv('/etc/passwd')", "42501"),
        ("SELECT * FROM read_parquet('/etc/x.parquet')", "42501"),
        ("SELECT * FROM read_json('/etc/x.json')", "42501"),
        ("SELECT * FROM '/etc/passwd'", "42601"),
        ('SELECT * FROM "/etc/passwd"', "42501"),
        ('SELECT * FROM "data.csv"', "42501"),
        ("SET enable_external_access = true", "42501"),
        ("SET lock_configuration = false", "42501"),
        ("SET memory_limit = '1TB'", "42501"),
        ("SET GLOBAL memory_limit = '1TB'", "42601"),
        ("SET SESSION threads = 64", "42501"),
        ("RESET allowed_directories", "42501"),
        ("PRAGMA memory_limit = '1TB'", "42601"),
        ("CALL pragma_database_list()", "25006"),
        ("SET allowed_directories = ['/']", "42601"),
        ("SELECT getenv('HOME')", "42501"),
    ],
)
def test_sandbox_refuses(db: LakeDatabase, sql: str, sqlstate: str) -> None:
    session = db.session()
    with pytest.raises(QueryError) as info:
        session.execute(sql).rows()
    assert info.value.sqlstate == sqlstate, info.value.message
    assert session.execute("SELECT count(*) FROM orders").rows() == [(3,)]


def test_reset_all_is_a_postgres_session_reset_and_the_sandbox_holds(db: LakeDatabase) -> None:
    session = db.session()
    session.execute("SET TimeZone = 'Asia/Tokyo'")
    session.execute("RESET ALL")
    assert session.execute("SHOW TimeZone").rows() != [("Asia/Tokyo",)]
    with pytest.raises(QueryError) as info:
        session.execute("SELECT * FROM read_csv('/etc/passwd')").rows()
    assert info.value.sqlstate == "42501"


def test_transaction_statements_by_parse_not_substring(db: LakeDatabase) -> None:
    session = db.session()
    assert session.execute("SELECT 'BEGIN' AS b").rows() == [("BEGIN",)]
    assert session.transaction_status == "I"
    session.execute("begin  isolation level repeatable read")
    assert session.transaction_status == "T"
    with pytest.raises(QueryError):
        session.execute("SELECT * FROM nope")
    assert session.transaction_status == "E"
    with pytest.raises(QueryError) as info:
        session.execute("SELECT 1")
    assert info.value.sqlstate == "25P02"
    assert session.execute("COMMIT").command_tag == "ROLLBACK"
    assert session.transaction_status == "I"


def test_refresh_is_idempotent_and_consistent(
    db: LakeDatabase, lake: Lake, snapshots: FakeSnapshots
) -> None:
    assert db.refresh() is False
    reader = db.session()
    reader.execute("BEGIN")
    before = reader.execute(
        "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM sales.order_lines)"
    ).rows()
    assert before == [(3, 3)]
    # one source transaction touching two tables, committed to the lake as one watermark
    lake.append("public.orders", orders_rows([4]), lsn=0x200)
    lake.append("sales.order_lines", lines_rows([(4, 1)]), lsn=0x200)
    snapshots.current = lake.watermark()
    assert db.refresh() is True
    # the open transaction keeps its snapshot; a new query sees both tables moved together
    assert reader.execute(
        "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM sales.order_lines)"
    ).rows() == [(3, 3)]
    reader.execute("COMMIT")
    fresh = db.session().execute(
        "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM sales.order_lines)"
    )
    assert fresh.rows() == [(4, 4)]


def test_the_catalog_is_rebuilt_only_when_a_tables_shape_changes(
    db: LakeDatabase, lake: Lake, snapshots: FakeSnapshots, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebuilds: list[int] = []
    rebuild = catalog.rebuild

    def counted(conn: Any, tables: Sequence[catalog.CatalogTable], database: str) -> None:
        rebuilds.append(len(tables))
        rebuild(conn, tables, database)

    monkeypatch.setattr(catalog, "rebuild", counted)
    columns = (
        "SELECT a.attname FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c "
        "ON c.oid = a.attrelid WHERE c.relname = 'orders' AND a.attnum > 0 ORDER BY a.attnum"
    )
    before = db.session().execute(columns).rows()
    assert before
    described = set(db._columns_cache)  # each table's columns, by its schema
    lake.append("public.orders", orders_rows([4]), lsn=0x200)  # rows only
    snapshots.current = lake.watermark()
    assert db.refresh() is True
    assert rebuilds == []
    assert set(db._columns_cache) == described  # the same schema: not described again
    assert db.session().execute(columns).rows() == before
    assert db.session().execute("SELECT count(*) FROM orders").rows() == [(4,)]
    # A column added: the catalog follows.
    table = lake.catalog.load_table("public.orders")
    with table.update_schema() as update:
        update.add_column("memo", StringType())
    lake.tables["public.orders"] = lake.catalog.load_table("public.orders")
    snapshots.current = lake.watermark()
    assert db.refresh() is True
    assert rebuilds == [len(lake.tables)]
    assert db.session().execute(columns).rows() == [*before, ("memo",)]
    assert len(set(db._columns_cache) - described) == 1  # orders' new schema


def test_refresh_under_concurrent_queries(
    db: LakeDatabase, lake: Lake, snapshots: FakeSnapshots
) -> None:
    seen: set[tuple[int, int]] = set()
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        session = db.session()
        while not stop.is_set():
            try:
                row = session.execute(
                    "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM sales.order_lines)"
                ).rows()[0]
                seen.add((row[0], row[1]))
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(4, 8):
        lake.append("public.orders", orders_rows([i]), lsn=0x100 + i)
        lake.append("sales.order_lines", lines_rows([(i, 1)]), lsn=0x100 + i)
        snapshots.current = lake.watermark()
        db.refresh()
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert all(a == b for a, b in seen), seen  # never half a transaction


def test_statement_timeout_and_cancel(db: LakeDatabase) -> None:
    session = db.session()
    session.execute("SET statement_timeout = '200ms'")
    assert session.execute("SHOW statement_timeout").rows() == [("200ms",)]
    slow = "SELECT count(*) FROM range(100000000000) a"
    with pytest.raises(QueryError) as info:
        session.execute(slow).rows()
    assert info.value.sqlstate == "57014"
    assert "statement timeout" in info.value.message
    session.execute("SET statement_timeout = 0")
    threading.Timer(0.2, session.interrupt).start()
    with pytest.raises(QueryError) as info:
        session.execute(slow).rows()
    assert info.value.sqlstate == "57014"
    assert "user request" in info.value.message
    assert session.execute("SELECT 1").rows() == [(1,)]


def test_statement_timeout_setting_is_every_sessions_default(lake: Lake) -> None:
    settings = DatabaseSettings(warehouse=lake.warehouse.as_uri(), statement_timeout=0.2)
    with LakeDatabase(settings, FakeSnapshots()) as db:
        session = db.session()
        assert session.execute("SHOW statement_timeout").rows() == [("200ms",)]
        with pytest.raises(QueryError) as info:
            session.execute("SELECT count(*) FROM range(100000000000) a").rows()
        assert info.value.sqlstate == "57014"
        session.execute("SET statement_timeout = 0")  # a session may lift its own
        assert session.execute("SELECT count(*) FROM range(1000) a").rows() == [(1000,)]


def test_streams_batches_without_row_cap(db: LakeDatabase) -> None:
    result = db.session().execute("SELECT i FROM range(300000) t(i)")
    batches = list(result)
    assert sum(b.num_rows for b in batches) == 300000
    assert len(batches) > 1
    assert result.command_tag == "SELECT 300000"


@pytest.mark.parametrize("params", [None, [0]])
def test_result_streams_before_the_query_ends(db: LakeDatabase, params: Any) -> None:
    # 10^10 rows: run to the end (or materialized) this would take hours and all memory
    session = db.session()
    sql = "SELECT i FROM range(10000000000) t(i)" + (" WHERE i >= $1" if params else "")
    started = time.monotonic()
    result = session.execute(sql, params)
    first = next(iter(result))
    result.close()
    assert first.num_rows > 0
    assert first.column(0)[0].as_py() == 0
    assert time.monotonic() - started < 20
    assert session.execute("SELECT 1").rows() == [(1,)]


def test_set_show_reset(db: LakeDatabase) -> None:
    session = db.session()
    session.execute("SET TimeZone TO 'Europe/Paris'")
    assert session.timezone == "Europe/Paris"
    assert session.execute("SHOW timezone").rows() == [("Europe/Paris",)]
    session.execute("RESET TimeZone")
    assert session.timezone == "UTC"
    session.execute("SET search_path TO sales")
    assert session.execute("SELECT count(*) FROM customers").rows() == [(2,)]
    assert session.execute("SELECT current_schema()").rows() == [("sales",)]
    for sql in ("SET extra_float_digits = 3", "SET client_encoding = 'UTF8'",
                "SET DateStyle = 'ISO'", "SET standard_conforming_strings = on",
                "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"):  # fmt: skip
        assert session.execute(sql).command_tag == "SET"
    with pytest.raises(QueryError):
        session.execute("SET TimeZone = 'Mars/Base'")


def _run(session: Any, sql: str, params: list[Any] | None = None) -> tuple[str, list[Any]]:
    result = session.execute(sql, params)
    rows = result.rows() if result.columns else []
    return result.command_tag, rows


def test_cursors_declare_fetch_move_close(db: LakeDatabase) -> None:
    s = db.session()
    assert _run(s, "BEGIN") == ("BEGIN", [])
    assert _run(
        s, "DECLARE c NO SCROLL CURSOR FOR SELECT id FROM orders WHERE id >= $1 ORDER BY id", [1]
    ) == ("DECLARE CURSOR", [])
    assert [c.name for c in s.cursor_columns("c") or []] == ["id"]
    assert [c.name for c in s.describe("FETCH 5 FROM c")] == ["id"]  # without fetching
    assert _run(s, "SELECT count(*) FROM orders") == ("SELECT 1", [(3,)])  # c stays open
    assert _run(s, "FETCH 2 FROM c") == ("FETCH 2", [(1,), (2,)])
    assert _run(s, "MOVE 5 c") == ("MOVE 1", [])
    assert _run(s, "FETCH NEXT FROM c") == ("FETCH 0", [])
    assert _run(s, "CLOSE c") == ("CLOSE CURSOR", [])
    assert s.cursor_columns("c") is None
    _run(s, "DECLARE d CURSOR FOR SELECT * FROM range(10) t(i)")
    assert _run(s, "FETCH ABSOLUTE 4 FROM d") == ("FETCH 1", [(3,)])
    assert _run(s, "FETCH RELATIVE 2 FROM d") == ("FETCH 1", [(5,)])
    assert _run(s, "FETCH ALL FROM d") == ("FETCH 4", [(6,), (7,), (8,), (9,)])
    with pytest.raises(QueryError) as info:
        s.execute("FETCH PRIOR FROM d")
    assert info.value.sqlstate == "55000"
    assert _run(s, "ROLLBACK") == ("ROLLBACK", [])
    with pytest.raises(QueryError) as info:
        s.execute("FETCH d")  # the block's end closed it
    assert info.value.sqlstate == "34000"


def test_cursor_with_hold_outlives_its_transaction(db: LakeDatabase) -> None:
    s = db.session()
    _run(s, "DECLARE h CURSOR WITH HOLD FOR SELECT * FROM range(5) t(i)")  # no block needed
    _run(s, "BEGIN")
    _run(s, "DECLARE h2 CURSOR WITH HOLD FOR SELECT 1")
    _run(s, "DECLARE plain CURSOR FOR SELECT 1")
    _run(s, "COMMIT")
    assert _run(s, "FETCH 2 h") == ("FETCH 2", [(0,), (1,)])
    assert _run(s, "FETCH h2") == ("FETCH 1", [(1,)])
    with pytest.raises(QueryError) as info:
        s.execute("FETCH plain")
    assert info.value.sqlstate == "34000"
    with pytest.raises(QueryError) as info:
        s.execute("DECLARE h CURSOR WITH HOLD FOR SELECT 1")
    assert info.value.sqlstate == "42P03"
    assert _run(s, "CLOSE ALL") == ("CLOSE CURSOR ALL", [])
    with pytest.raises(QueryError) as info:
        s.execute("DECLARE w CURSOR WITH HOLD FOR DELETE FROM orders")
    assert info.value.sqlstate in ("25006", "42601")


def test_rollback_to_savepoint_closes_the_cursors_declared_after_it(db: LakeDatabase) -> None:
    s = db.session()
    _run(s, "BEGIN")
    _run(s, "DECLARE before CURSOR FOR SELECT 1")
    assert _run(s, "SAVEPOINT a") == ("SAVEPOINT", [])
    _run(s, "DECLARE in_a CURSOR WITH HOLD FOR SELECT 2")
    _run(s, "SAVEPOINT b")
    _run(s, "DECLARE in_b CURSOR FOR SELECT 3")
    assert _run(s, "RELEASE SAVEPOINT b") == ("RELEASE", [])  # in_b now belongs to a
    _run(s, "SAVEPOINT c")
    _run(s, "DECLARE in_c CURSOR FOR SELECT 4")
    with pytest.raises(QueryError) as info:
        s.execute("SELECT 1/0")
    assert info.value.sqlstate == "22012"
    assert _run(s, "ROLLBACK TO SAVEPOINT c") == ("ROLLBACK", [])  # the block is usable again
    assert s.cursor_columns("in_c") is None
    assert _run(s, "FETCH in_b") == ("FETCH 1", [(3,)])
    assert _run(s, "ROLLBACK TO a") == ("ROLLBACK", [])  # WITH HOLD too, as in Postgres
    assert [s.cursor_columns(n) is None for n in ("before", "in_a", "in_b")] == [
        False, True, True,
    ]  # fmt: skip
    for sql in ("ROLLBACK TO c", "RELEASE b"):  # gone; the error aborts the block
        with pytest.raises(QueryError) as info:
            s.execute(sql)
        assert info.value.sqlstate == "3B001"
        assert _run(s, "ROLLBACK TO a") == ("ROLLBACK", [])
    assert _run(s, "FETCH before") == ("FETCH 1", [(1,)])
    _run(s, "ROLLBACK")
    with pytest.raises(QueryError) as info:
        s.execute("ROLLBACK TO a")  # outside a block
    assert info.value.sqlstate == "25P01"


def test_session_timezone_drives_timestamptz_arithmetic(db: LakeDatabase) -> None:
    # What Postgres 15 answers in Europe/Berlin: 23:30 UTC on 1 May is 01:30 on 2 May there
    s = db.session()
    _run(s, "SET TimeZone = 'Europe/Berlin'")
    ts = "'2024-05-01 23:30:00+00'::timestamptz"
    _, rows = _run(
        s,
        f"SELECT date_trunc('day', {ts}), {ts}::date, extract(hour FROM {ts}), {ts}::text, "
        f"'2024-05-01 12:00:00'::timestamptz = '2024-05-01 10:00:00+00'::timestamptz",
    )
    berlin = dt.timezone(dt.timedelta(hours=2))
    assert rows == [
        (dt.datetime(2024, 5, 2, tzinfo=berlin), dt.date(2024, 5, 2), 1,
         "2024-05-02 01:30:00+02", True)
    ]  # fmt: skip
    _run(s, "SET TimeZone = 'UTC'")
    assert _run(s, f"SELECT {ts}::date, extract(hour FROM {ts})")[1] == [(dt.date(2024, 5, 1), 23)]
    other = db.session()  # another session keeps its own zone
    assert _run(other, f"SELECT {ts}::date")[1] == [(dt.date(2024, 5, 1),)]
