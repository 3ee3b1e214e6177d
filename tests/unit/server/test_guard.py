"""The allow-list against the DuckDB streambed pins: every name on it exists, and every DuckDB
function not on it is refused by the check (on the parse tree, without running anything)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from pglast import parse_sql

from streambed.server import guard
from streambed.server.allowed_functions import SCALAR_FUNCTIONS
from streambed.server.database import DatabaseSettings, LakeDatabase
from tests.unit.wire.conftest import NoTables


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakeDatabase]:
    warehouse: Path = tmp_path_factory.mktemp("warehouse")
    db = LakeDatabase(DatabaseSettings(warehouse=str(warehouse)), NoTables())
    yield db
    db.close()


@pytest.fixture(scope="module")
def functions(database: LakeDatabase) -> dict[str, set[str]]:
    """DuckDB's own functions (extensions loaded), by function_type."""
    rows = database._conn.execute(
        "SELECT DISTINCT function_type, function_name FROM duckdb_functions() "
        "WHERE database_name = 'system'"
    ).fetchall()
    out: dict[str, set[str]] = {}
    for kind, name in rows:
        out.setdefault(kind, set()).add(name)
    return out


def _context(database: LakeDatabase) -> guard.Context:
    return guard.Context(
        macros=database.macros,
        warehouse=database.settings.warehouse_path,
        database="streambed",
        search_path=("public",),
        serves=lambda schema, name: (schema, name) == ("public", "orders"),
    )


def _check(database: LakeDatabase, sql: str) -> None:
    guard.check_statement(parse_sql(sql)[0].stmt, _context(database))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def test_pinned_duckdb() -> None:
    assert duckdb.__version__ == "1.5.5"  # the lists below were reviewed for this version


def test_every_allowed_function_exists(functions: dict[str, set[str]]) -> None:
    callable_ = functions["scalar"] | functions["aggregate"] | functions["macro"]
    assert sorted(SCALAR_FUNCTIONS - callable_) == []
    tables = functions["table"] | functions.get("table_macro", set())
    assert sorted(guard.TABLE_FUNCTIONS - tables) == []
    assert sorted(guard.WAREHOUSE_READERS - tables) == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT unnest([1, 2])",
        "SELECT columns(*) FROM (SELECT 1 AS a)",
        "SELECT if(true, 1, 2)",
        "SELECT ifnull(NULL, 1)",
        "SELECT try(1)",
        "SELECT grouping_id(a) FROM (SELECT 1 AS a) GROUP BY a",
        "SELECT concat_ws(',', unpack(columns(*))) FROM (SELECT 1 AS a, 2 AS b)",
    ],
)
def test_special_forms_exist(sql: str) -> None:
    assert any(name in sql for name in guard.SPECIAL_FORMS)
    duckdb.connect().execute(sql).fetchall()  # none is "does not exist"


def test_nothing_denied_is_on_an_allow_list() -> None:
    listed = SCALAR_FUNCTIONS | guard.TABLE_FUNCTIONS | guard.WAREHOUSE_READERS
    assert sorted(n for n in listed if guard._denied(n) is not None) == []


def test_every_other_duckdb_table_function_is_refused(
    database: LakeDatabase, functions: dict[str, set[str]]
) -> None:
    tables = functions["table"] | functions.get("table_macro", set())
    others = sorted(tables - guard.TABLE_FUNCTIONS - guard.WAREHOUSE_READERS)
    assert "pandas_scan" in others and "query" in others
    for name in others:
        with pytest.raises(guard.GuardError) as info:
            _check(database, f"SELECT * FROM {_quoted(name)}(NULL)")
        assert info.value.sqlstate in ("42501", "42883"), name
        with pytest.raises(guard.GuardError):
            _check(database, f"SELECT * FROM main.{_quoted(name)}(NULL)")


def test_every_other_duckdb_function_is_refused(
    database: LakeDatabase, functions: dict[str, set[str]]
) -> None:
    everything = set().union(*functions.values())
    others = sorted(
        n
        for n in everything - SCALAR_FUNCTIONS - guard.SPECIAL_FORMS - guard.REWRITTEN
        if n.isidentifier()
    )
    assert "current_query" in others and "getvariable" in others
    for name in others:
        with pytest.raises(guard.GuardError):
            _check(database, f"SELECT {_quoted(name)}(1)")


def test_warehouse_readers_only_inside_the_warehouse(database: LakeDatabase) -> None:
    root = database.settings.warehouse_path
    _check(database, f"SELECT * FROM read_parquet('{root}/public/t/data/x.parquet')")
    _check(database, f"SELECT * FROM read_parquet('file://{root}/x.parquet')")
    for path in ("/etc/passwd", f"{root}/../x", f"{root}x/y", "s3://other/x"):
        with pytest.raises(guard.GuardError) as info:
            _check(database, f"SELECT * FROM read_parquet('{path}')")
        assert info.value.sqlstate == "42501", path


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        ("SELECT pg_catalog.now()", None),
        ("SELECT information_schema._pg_expandarray(ARRAY[1])", None),
        ("SELECT sb_pg.format_type(23, -1)", None),  # a streambed macro, by its schema
        ("SELECT pg_catalog.format_type(23, -1)", None),
        ("SELECT main.query('select 1')", "42501"),
        ("SELECT pg_catalog.getvariable('x')", "42501"),
        ("SELECT public.lower('x')", "42883"),
        ("SELECT sb_pg.lower('x')", "42883"),  # not a streambed macro
        ("SELECT sb_divisor(1, 2)", "42883"),  # a catalog macro, not in main: only qualified
        ("SELECT sb_pg.sb_divisor(1, 2)", None),
        ("SELECT sb_sum_result(1::smallint, 2)", None),  # a streambed macro in main
        ("SELECT a.b.lower('x')", "0A000"),
        ("SELECT * FROM streambed.at_time('public.orders', now())", None),
        ("SELECT * FROM \"Streambed\".at_time('public.orders', now())", "42883"),
        ("SELECT * FROM streambed.at_nothing('public.orders', now())", "42883"),
        ("SELECT * FROM orders", None),
        ("SELECT * FROM public.orders", None),
        ("SELECT * FROM sales.orders", "42P01"),
        ("SELECT * FROM streambed.public.orders", None),
        ("SELECT * FROM other.public.orders", "0A000"),
        ("SELECT * FROM pg_class, pg_catalog.pg_type, information_schema.tables", None),
        ("SELECT * FROM sb_pg.sb_types", None),
        ("SELECT * FROM duckdb_tables", "42P01"),
        ("SELECT * FROM x JOIN (WITH x AS (SELECT 1) SELECT * FROM x) y ON true", "42P01"),
        ("WITH a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a", "42P01"),
        ("WITH RECURSIVE a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a", None),
        ("SELECT * FROM (SELECT 1) s WHERE EXISTS (SELECT * FROM query('x'))", "42501"),
        ("SELECT count(*) FILTER (WHERE getenv('x') IS NULL) FROM orders", "42501"),
        ("SELECT sum(1) OVER (ORDER BY current_query())", "42501"),
        ("SELECT 'x' SIMILAR TO 'y'", None),
        ("SELECT * FROM histogram('duckdb_settings', name)", "42883"),  # a table macro
        ("SELECT histogram(x) FROM (SELECT 1 AS x) s", None),  # the aggregate
        ("SELECT * FROM abs(-1)", "42883"),  # DuckDB has no scalar functions in FROM
        ("SELECT * FROM lower('x')", None),  # ... but the rewrite makes these one-row queries
        ("SELECT * FROM main.set_config('search_path', 'x', false)", "42883"),
        ("SELECT current_setting('x')", None),  # the rewrite answers it from the session
        ("SELECT \"Current_Setting\"('x')", "42501"),  # DuckDB's would answer it
    ],
)
def test_names_and_scopes(database: LakeDatabase, sql: str, sqlstate: str | None) -> None:
    if sqlstate is None:
        _check(database, sql)
        return
    with pytest.raises(guard.GuardError) as info:
        _check(database, sql)
    assert info.value.sqlstate == sqlstate, info.value.message


def test_streambed_macros_are_found_at_startup(database: LakeDatabase) -> None:
    macros = database.macros
    assert ("sb_pg", "format_type") in macros.scalar
    assert ("main", "sb_sum_result") in macros.scalar
    assert all(schema != "system" for schema, _ in macros.scalar)
    # a catalog macro created later the same way would be found the same way
    conn = duckdb.connect()
    conn.execute("CREATE SCHEMA sb_pg")
    conn.execute("CREATE MACRO sb_pg.pg_get_keywords() AS TABLE SELECT 'a' AS word")
    found = guard.Macros.of(conn.execute(guard.MACROS_QUERY).fetchall())
    assert found.table == {("sb_pg", "pg_get_keywords")}
