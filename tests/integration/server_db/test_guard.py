"""The allow-list on the real LakeDatabase: every refused statement gets its SQLSTATE before
DuckDB sees it, and the session (and the server) keep answering afterwards."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streambed.server.database import DatabaseSettings, LakeDatabase, QueryError

from .conftest import FakeSnapshots, Lake, make_lake


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    return make_lake(tmp_path_factory.mktemp("guard"))


@pytest.fixture(scope="module")
def db(lake: Lake) -> Iterator[LakeDatabase]:
    database = LakeDatabase(
        DatabaseSettings(warehouse=lake.warehouse.as_uri()), FakeSnapshots(lake.watermark())
    )
    database.refresh()
    yield database
    database.close()


def _refused(db: LakeDatabase, sql: str) -> QueryError:
    session = db.session()
    with pytest.raises(QueryError) as info:
        session.execute(sql).rows()
    assert session.execute("SELECT 1").rows() == [(1,)]  # the session still answers
    return info.value


# (sql, SQLSTATE): each is refused before DuckDB runs it
REFUSED = [
    # crashes the process in DuckDB 1.5.5, and the other Python-registered functions
    ("SELECT * FROM pandas_scan(NULL)", "42501"),
    ("SELECT * FROM arrow_scan(NULL, NULL, NULL)", "42501"),
    ("SELECT * FROM arrow_scan_dumb(NULL, NULL, NULL)", "42501"),
    ("SELECT * FROM python_map_function(NULL, NULL, NULL, NULL, NULL)", "42501"),
    ("SELECT * FROM main.pandas_scan(NULL)", "42501"),
    ("EXPLAIN SELECT * FROM pandas_scan(NULL)", "42501"),
    ("EXPLAIN ANALYZE SELECT * FROM pandas_scan(NULL)", "42501"),
    ("DECLARE c CURSOR WITH HOLD FOR SELECT * FROM pandas_scan(NULL)", "42501"),
    ('SELECT * FROM "PANDAS_SCAN"(NULL)', "42501"),
    ("SELECT sb_quotient(1, 2)", "42501"),
    # logging, profiling: server-wide state and other sessions' SQL
    ("SELECT * FROM enable_logging(storage := 'memory')", "42501"),
    ("SELECT * FROM enable_logging(storage := 'file', storage_path := '/tmp/x')", "42501"),
    ("SELECT message FROM duckdb_logs()", "42501"),
    ("SELECT * FROM duckdb_logs_parsed('QueryLog')", "42501"),
    ("SELECT * FROM enable_profiling(save_location := '/tmp/p.json')", "42501"),
    ("SELECT * FROM disable_logging()", "42501"),
    ("SELECT * FROM truncate_duckdb_logs()", "42501"),
    ("SELECT write_log('x')", "42501"),
    # settings, paths, extensions, secrets
    ("SELECT * FROM duckdb_settings()", "42501"),
    ("SELECT * FROM duckdb_views()", "42501"),
    ("SELECT * FROM duckdb_extensions()", "42501"),
    ("SELECT * FROM duckdb_secrets()", "42501"),
    ("SELECT * FROM duckdb_databases()", "42501"),
    ("SELECT * FROM pragma_database_list()", "42501"),
    ("SELECT * FROM pragma_show('orders')", "42501"),
    ("SELECT \"CURRENT_SETTING\"('home_directory')", "42501"),
    ("SELECT getvariable('x')", "42501"),
    ("SELECT current_query()", "42501"),
    ("SELECT which_secret('s3://b/x', 's3')", "42501"),
    ("SELECT getenv('HOME')", "42501"),
    ("SELECT set_config('enable_external_access', 'true', false)", "42501"),
    ("SELECT main.set_config('search_path', 'x', false)", "42883"),
    ("SELECT current_setting('home_directory')", "42704"),  # the session's, not DuckDB's
    # SQL text the server never parsed
    ("SELECT * FROM \"query\"('select 42')", "42501"),
    ("SELECT * FROM main.query('select 42')", "42501"),
    ("SELECT * FROM query_table('orders')", "42501"),
    ("SELECT * FROM json_execute_serialized_sql('{}')", "42501"),
    ("SELECT json_serialize_plan('select 1')", "42501"),
    ("SELECT (SELECT 1 FROM query('select 1'))", "42501"),
    ("WITH q AS (SELECT * FROM query('select 1')) SELECT * FROM q", "42501"),
    ("SELECT * FROM orders WHERE id IN (SELECT * FROM query('select 1'))", "42501"),
    # writes and server state
    ("SELECT * FROM checkpoint()", "42501"),
    ("SELECT nextval('s')", "42501"),
    ("SELECT * FROM set_iceberg_table_properties('x', NULL)", "42501"),
    # files outside the lake
    ("SELECT * FROM read_csv('/etc/passwd')", "42501"),
    ("SELECT * FROM read_text('/etc/hostname')", "42501"),
    ("SELECT * FROM glob('/*')", "42501"),
    ("SELECT * FROM read_blob(current_date::text)", "42501"),
    ("SELECT * FROM iceberg_scan('/etc/x')", "42501"),
    ('SELECT * FROM "/etc/passwd"', "42501"),
    # not on the list: undefined_function, as Postgres says for a function it lacks
    ("SELECT * FROM test_all_types()", "42883"),
    ("SELECT * FROM summary(1)", "42883"),
    ("SELECT no_such_function(1)", "42883"),
    ("SELECT * FROM sqlite_scan('x', 'y')", "42883"),
    ("SELECT lower.lower('A')", "42883"),  # a schema that is not streambed's
    ("SELECT sb_pg.no_such_macro()", "42883"),
    ("SELECT streambed.at_time('public.orders', now())", "42883"),  # time travel is FROM only
    ("SELECT memory.main.lower('A')", "0A000"),
    # DuckDB's system views and schemas are no relations of this server
    ("SELECT sql FROM duckdb_views", "42P01"),
    ("SELECT * FROM duckdb_settings", "42P01"),
    ("SELECT * FROM sqlite_master", "42P01"),
    ("SELECT * FROM pragma_database_list", "42P01"),
    ("SELECT * FROM main.duckdb_tables", "42P01"),
    ("SELECT * FROM pg_catalog.duckdb_views", "42P01"),
    ("SELECT * FROM information_schema.pg_prepared_statements", "42P01"),
    ("SELECT * FROM pg_catalog.pg_prepared_statements", "42P01"),
    ("SELECT * FROM system.main.duckdb_views", "0A000"),
    ("WITH x AS (SELECT 1) SELECT * FROM duckdb_views", "42P01"),
    # a CTE named like a system view does not make the view readable inside its own body
    ("WITH duckdb_views AS (SELECT * FROM duckdb_views) SELECT * FROM duckdb_views", "42P01"),
    ("SELECT * FROM (WITH sqlite_master AS (SELECT 1) SELECT 1) s, sqlite_master", "42P01"),
    # syntax Postgres cannot parse: 42601, as Postgres answers
    ("SELEC 1", "42601"),
    ("DESCRIBE orders", "42601"),
    ("SUMMARIZE orders", "42601"),
    ("INSTALL httpfs", "42601"),
    ("LOAD httpfs", "42601"),
    ("PRAGMA threads = 1", "42601"),
    ("FROM orders", "42601"),
    ("FROM \"query\"('select 42')", "42601"),
    ("SELECT * FROM 'data.csv'", "42601"),
    ("SELECT [1, 2]", "42601"),
    ("ATTACH ':memory:' AS m", "42601"),
    ("USE memory", "42601"),
    ("SET GLOBAL threads = 1", "42601"),
    ("SELECT 'unterminated", "42601"),
    # writes, DDL, COPY, SET of DuckDB settings: as before
    ("COPY orders TO '/tmp/x.csv'", "25006"),
    ("CREATE TABLE t (a int)", "25006"),
    ("INSERT INTO orders VALUES (9)", "25006"),
    ("EXPLAIN DELETE FROM orders", "25006"),
    ("EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1", "25006"),
    ("SELECT * INTO t2 FROM orders", "25006"),
    ("SELECT * FROM orders FOR UPDATE", "25006"),
    ("SET enable_external_access = true", "42501"),
    ("SET threads = 1", "42501"),
    ("DO $$ BEGIN END $$", "25006"),
]


@pytest.mark.parametrize(("sql", "sqlstate"), REFUSED)
def test_refused_before_duckdb(db: LakeDatabase, sql: str, sqlstate: str) -> None:
    error = _refused(db, sql)
    assert error.sqlstate == sqlstate, error.message


_OUTSIDE = [
    "/etc/passwd",
    "file:///etc/passwd",
    "data.csv",
    "../../../etc/passwd",
    "/etc/*",
    "https://example.com/x.csv",
    "s3://another-bucket/x.parquet",
]
_READERS = [
    "read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_ndjson", "read_parquet",
    "parquet_scan", "parquet_metadata", "parquet_schema", "read_text", "read_blob", "glob",
    "sniff_csv", "read_avro", "iceberg_scan", "iceberg_metadata", "iceberg_snapshots",
    "read_duckdb",
]  # fmt: skip


@pytest.mark.parametrize("reader", _READERS)
def test_file_readers_outside_the_lake_are_refused(
    db: LakeDatabase, lake: Lake, reader: str
) -> None:
    escape = f"{lake.warehouse}/../../etc/passwd"
    for path in [*_OUTSIDE, escape]:
        for sql in (
            f"SELECT * FROM {reader}('{path}')",
            f"SELECT * FROM {reader}(ARRAY['{path}'])",
            f"SELECT * FROM main.{reader}('{path}')",
            f"SELECT * FROM (SELECT 1) s, LATERAL {reader}('{path}')",
        ):
            assert _refused(db, sql).sqlstate == "42501", sql


# what a read-only client keeps: each answers
ALLOWED = [
    ("SELECT count(*) FROM orders", [(3,)]),
    ("SELECT pg_catalog.lower('A'), main.upper('b'), pg_catalog.now() IS NOT NULL",
     [("a", "B", True)]),
    ("SELECT * FROM generate_series(1, 2)", [(1,), (2,)]),
    ("SELECT * FROM range(2) t(i)", [(0,), (1,)]),
    ("SELECT * FROM unnest(ARRAY[1, 2]) u", [(1,), (2,)]),
    ("SELECT generate_subscripts(ARRAY['a', 'b'], 1)", [(1,), (2,)]),
    ("SELECT count(*) FROM json_each('{\"a\": 1, \"b\": 2}')", [(2,)]),
    ("SELECT count(*) FROM information_schema._pg_expandarray(ARRAY[5, 6])", None),
    ("SELECT format_type(23, -1), pg_catalog.pg_get_userbyid(10)", [("integer", "streambed")]),
    ("SELECT set_config('search_path', 'sales', false)", [("sales",)]),
    ("SELECT count(*) FROM string_to_array('a,b', ',') AS s", [(1,)]),
    ("SELECT 'abc' ~ 'b', 'a' LIKE 'a!%' ESCAPE '!', TRIM('  x ')", [(True, False, "x")]),
    ("SELECT EXTRACT(year FROM DATE '2024-05-01')", None),
    ("WITH x AS (SELECT 1 AS a) SELECT * FROM x", [(1,)]),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
     "SELECT count(*) FROM r", [(3,)]),
    ("VALUES (1), (2)", [(1,), (2,)]),
    ("TABLE sales.customers", None),
    ("SELECT count(*) FROM streambed.at_lsn('public.orders', '0/100')", [(3,)]),
    ("SELECT relname FROM pg_class WHERE relname = 'orders'", [("orders",)]),
    ("SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = 'sales'", [(1,)]),
    ("SELECT count(*) FROM information_schema.tables WHERE table_name = 'orders'", [(1,)]),
    ("SELECT pg_sleep(0)", None),
    ("SELECT count(*) FROM information_schema.referential_constraints", [(0,)]),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "rows"), ALLOWED)
def test_allowed(db: LakeDatabase, sql: str, rows: list[tuple[object, ...]] | None) -> None:
    got = db.session().execute(sql).rows()
    if rows is not None:
        assert got == rows
    else:
        assert got


def test_warehouse_readers_still_read_the_lake(db: LakeDatabase, lake: Lake) -> None:
    location = lake.tables["public.orders"].metadata_location
    rows = db.session().execute(f"SELECT count(*) FROM iceberg_scan('{location}')").rows()
    assert rows == [(3,)]


def test_syntax_error_has_postgres_message_and_position(db: LakeDatabase) -> None:
    error = _refused(db, "SELECT * FROM orders ORDER id")
    assert (error.sqlstate, error.message) == ("42601", 'syntax error at or near "id"')
    assert error.position == 28
    error = _refused(db, "SELECT 'é', 'ü' ORDER x")  # characters, not bytes
    assert error.position == 23


def test_refusal_in_a_transaction_block_fails_it(db: LakeDatabase) -> None:
    session = db.session()
    session.execute("BEGIN")
    for sql in ("SELECT * FROM pandas_scan(NULL)", "SELEC 1"):
        with pytest.raises(QueryError):
            session.execute(sql)
        assert session.transaction_status == "E"
        with pytest.raises(QueryError) as info:
            session.execute("SELECT 1")
        assert info.value.sqlstate == "25P02"
        session.execute("ROLLBACK")
        session.execute("BEGIN")
    session.execute("ROLLBACK")


def test_the_guard_checks_the_clients_sql_not_the_rewrite(db: LakeDatabase) -> None:
    """Time travel and exact numerics are rewritten to iceberg_scan and Python-registered
    functions after the check; the client may not write those itself."""
    session = db.session()
    rows = session.execute(
        "SELECT sum(amount) / count(*) FROM streambed.at_lsn('public.orders', '0/100')"
    ).rows()
    assert len(rows) == 1
    assert _refused(db, "SELECT sb_quotient_text(1, 2)").sqlstate == "42501"


# ---- no server paths in any answer -------------------------------------------------------


def _no_paths(text: str, lake: Lake) -> None:
    assert str(lake.warehouse) not in text
    assert str(lake.warehouse.resolve()) not in text


def test_duckdb_errors_name_no_server_path(db: LakeDatabase, lake: Lake) -> None:
    for missing in (lake.warehouse.as_uri(), str(lake.warehouse)):
        error = _refused(db, f"SELECT * FROM read_parquet('{missing}/public/no_such.parquet')")
        _no_paths(error.message, lake)
        assert "<lake>/public/no_such.parquet" in error.message


def test_explain_names_no_server_path(db: LakeDatabase, lake: Lake) -> None:
    session = db.session()
    for sql in (
        "EXPLAIN SELECT * FROM orders",
        "EXPLAIN SELECT * FROM streambed.at_lsn('public.orders', '0/100')",
        "EXPLAIN ANALYZE SELECT * FROM streambed.at_lsn('public.orders', '0/100')",
        f"EXPLAIN SELECT * FROM iceberg_scan('{lake.tables['public.orders'].metadata_location}')",
    ):
        text = "\n".join(str(v) for row in session.execute(sql).rows() for v in row)
        _no_paths(text, lake)
        assert text


def test_catalog_views_show_no_server_path(db: LakeDatabase, lake: Lake) -> None:
    session = db.session()
    for sql in (
        "SELECT * FROM pg_views",
        "SELECT * FROM pg_catalog.pg_views",
        "SELECT * FROM information_schema.views",
        "SELECT pg_get_viewdef(c.oid) FROM pg_class c",
        "SELECT * FROM pg_class",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM information_schema.columns",
    ):
        text = repr(session.execute(sql).rows())
        _no_paths(text, lake)
    for sql in ("SELECT * FROM duckdb_views()", "SELECT sql FROM duckdb_views"):
        assert _refused(db, sql).sqlstate in ("42501", "42P01")


def test_a_missing_data_file_is_reported_without_its_path(tmp_path: Path) -> None:
    lake = make_lake(tmp_path)
    data = next((lake.warehouse / "public" / "orders" / "data").rglob("*.parquet"))
    data.unlink()
    database = LakeDatabase(
        DatabaseSettings(warehouse=lake.warehouse.as_uri()), FakeSnapshots(lake.watermark())
    )
    try:
        database.refresh()
        error = _refused(database, "SELECT * FROM orders")
        _no_paths(error.message, lake)
        assert "<lake>" in error.message
    finally:
        database.close()


def test_time_travel_on_a_lost_metadata_file_names_no_path(tmp_path: Path) -> None:
    lake = make_lake(tmp_path)
    database = LakeDatabase(
        DatabaseSettings(warehouse=lake.warehouse.as_uri()), FakeSnapshots(lake.watermark())
    )
    try:
        database.refresh()
        location = lake.tables["public.orders"].metadata_location
        Path(location.removeprefix("file://")).unlink()
        error = _refused(database, "SELECT * FROM streambed.at_lsn('public.orders', '0/100')")
        _no_paths(error.message, lake)
        assert "<lake>/public/orders/metadata/" in error.message
    finally:
        database.close()


# ---- statement_timeout at any point ------------------------------------------------------


def test_statement_timeout_while_rows_stream_is_57014_and_fails_the_block(
    db: LakeDatabase,
) -> None:
    session = db.session()
    session.execute("SET statement_timeout = '300ms'")
    session.execute("BEGIN")
    result = session.execute("SELECT * FROM range(3000000) t(i), range(100) u(j)")
    batches = result.batches()
    assert next(batches).num_rows > 0
    time.sleep(0.5)  # the timeout fires while the caller (the wire layer) holds a batch
    with pytest.raises(QueryError) as info:
        for _ in batches:
            pass
    assert info.value.sqlstate == "57014"
    assert "statement timeout" in info.value.message
    assert session.transaction_status == "E"
    with pytest.raises(QueryError) as info:
        session.execute("SELECT 1")
    assert info.value.sqlstate == "25P02"
    session.execute("ROLLBACK")
    session.execute("SET statement_timeout = 0")
    assert session.execute("SELECT 1").rows() == [(1,)]


def test_statement_timeout_inside_duckdb_is_57014(db: LakeDatabase) -> None:
    session = db.session()
    session.execute("SET statement_timeout = '300ms'")
    session.execute("BEGIN")
    with pytest.raises(QueryError) as info:
        session.execute(
            "SELECT count(*) FROM range(100000000) t(i), range(1000) u(j) GROUP BY i % 7"
        ).rows()
    assert info.value.sqlstate == "57014"
    assert session.transaction_status == "E"
    session.execute("ROLLBACK")


def test_cancel_while_rows_stream_is_57014(db: LakeDatabase) -> None:
    session = db.session()
    result = session.execute("SELECT * FROM range(3000000) t(i), range(100) u(j)")
    batches = result.batches()
    next(batches)
    threading.Thread(target=session.interrupt).start()
    time.sleep(0.1)
    with pytest.raises(QueryError) as info:
        for _ in batches:
            pass
    assert info.value.sqlstate == "57014"
    assert "user request" in info.value.message
    assert session.execute("SELECT 1").rows() == [(1,)]
