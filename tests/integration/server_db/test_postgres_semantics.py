"""Postgres 15 is the oracle: the same self-contained queries on the source Postgres and on
the lake database, compared by type OID and value (as psycopg decodes Postgres's answer).

Covers avg() of integers and numerics and division involving numerics (numeric in Postgres,
double in plain DuckDB) as select-list items, per row, in windows, inside expressions, CTEs
and subqueries; SELECT DISTINCT over them; sum() (bigint for int2/int4 in Postgres, HUGEINT
in DuckDB), also of an aggregate; extract() (numeric) and date_part() (double precision);
and timestamptz computed in the session TimeZone."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.string import TextLoader

from streambed.server.database import DatabaseSettings, LakeDatabase, QueryError, ServedWatermark
from streambed.server.pgtypes import encode_text_column
from tests.fixtures.postgres import ThrowawayPostgres

pytestmark = pytest.mark.integration

NUMBERS = "(VALUES (1, 1.25::numeric(10,2), 0.5::float8), (1, 2.5, 1.5), (2, 3, NULL)) v(i, n, f)"
TS = "'2024-05-01 23:30:00+00'::timestamptz"
TYPED = (  # NUMBERS with n numeric(10,2) in every row, as a table column is
    "(SELECT i, n::numeric(10,2) AS n, f FROM (VALUES (1, 1.25, 0.5::float8), (1, 2.5, 1.5), "
    "(2, 3, NULL)) v(i, n, f)) t"
)
DAYS = (
    "(VALUES (DATE '2024-05-01', TIMESTAMP '2024-05-01 10:20:30.5', "
    "'2024-05-01 23:30:00.25+00'::timestamptz, INTERVAL '1 day 2 hours 3.25 seconds', "
    "TIME '10:20:30.5'), (DATE '1999-12-31', TIMESTAMP '1999-12-31 23:59:59', "
    "'1999-12-31 23:59:59+00'::timestamptz, INTERVAL '1 year 2 months 3 days', "
    "TIME '00:00:00')) v(d, ts, tz, iv, t)"
)

QUERIES = [
    f"SELECT avg(i), avg(n), avg(f), avg(i::bigint), avg(i::smallint) FROM {NUMBERS}",
    f"SELECT round(avg(i), 2), round(avg(n), 3), avg(DISTINCT i) FROM {NUMBERS}",
    f"SELECT i, avg(n) FROM {NUMBERS} GROUP BY i ORDER BY i",
    f"SELECT avg(i) FILTER (WHERE i > 1), avg(n) FILTER (WHERE false) FROM {NUMBERS}",
    "SELECT avg(x) FROM (VALUES (0), (0), (1)) v(x)",
    "SELECT avg(x) FROM (VALUES (12345), (12346), (12346)) v(x)",
    "SELECT avg(x) FROM (VALUES (30000), (0), (0)) v(x)",
    "SELECT avg(x) FROM (VALUES (-7), (-8)) v(x)",
    "SELECT avg(x) FROM (VALUES (123456789012), (2)) v(x)",
    "SELECT avg(x) FROM (VALUES (0.001::numeric(10,3)), (0.002)) v(x)",
    "SELECT 7 / 2, -7 / 2, 7.0 / 2, 1.50 / 3, 10.00 / 4, 1 / 3.0, -7.5 / 2, 2.5 / 0.5::float8",
    f"SELECT sum(n) / 3, sum(n) / count(i), sum(i) / sum(n), round(100.0 * count(*) / 7, 2), "
    f"sum(f) / 2, max(i) / 2 FROM {NUMBERS}",
    f"SELECT i, sum(n) / count(*) FROM {NUMBERS} GROUP BY i ORDER BY i",
    "SELECT 123456789.123 / 7, 0.001 / 3, 1 / 7.000000",
    f"SELECT date_trunc('day', {TS}), {TS}::date, {TS}::text",
    f"SELECT date_trunc('month', {TS}), date_trunc('hour', {TS} + interval '1 hour')",
    "SELECT '2024-03-31 01:30:00'::timestamptz, '2024-10-27 02:30:00+00'::timestamptz::text",
    # sum(): int2/int4 bigint, int8 and numeric numeric, float double; count bigint
    f"SELECT sum(i), sum(i::smallint), sum(i::bigint), sum(n), sum(f), count(*), count(n) "
    f"FROM {NUMBERS}",
    f"SELECT i, sum(i) * 2, sum(i) + 1, sum(DISTINCT i) FILTER (WHERE i > 0) FROM {NUMBERS} "
    f"GROUP BY i HAVING sum(i) > 0 ORDER BY sum(i), i",
    f"SELECT i, sum(i) OVER (ORDER BY i, n), sum(sum(i)) OVER () FROM {NUMBERS} "
    f"GROUP BY i, n ORDER BY i, n",
    f"SELECT s + 1, s FROM (SELECT sum(i) AS s FROM {NUMBERS}) q",
    f"WITH t AS (SELECT i, sum(i) AS s FROM {NUMBERS} GROUP BY i) SELECT sum(s), max(s) FROM t",
    f"SELECT (SELECT sum(i) FROM {NUMBERS}), coalesce(sum(i), 0) FROM {NUMBERS}",
    "SELECT sum(x) FROM (VALUES (2147483647), (2147483647), (1)) v(x)",
    "SELECT sum(x) FROM (VALUES (1::int)) v(x) WHERE false",
    # avg() and division inside expressions, CTEs, subqueries, HAVING, WHERE, aggregates
    f"SELECT i, avg(n) * 100, round(avg(n) * 2, 1), avg(i) + 1 FROM {TYPED} GROUP BY i ORDER BY i",
    f"WITH a AS (SELECT i, avg(n) AS a FROM {TYPED} GROUP BY i) SELECT i, a, a * 2 FROM a "
    f"ORDER BY i",
    f"SELECT (SELECT avg(n) FROM {TYPED}), x FROM (SELECT avg(i) AS x FROM {TYPED}) s",
    f"SELECT i, sum(n) / count(*) > 1, avg(n) > 2 FROM {TYPED} GROUP BY i ORDER BY i",
    f"SELECT i FROM {TYPED} GROUP BY i HAVING avg(n) > 2",
    f"SELECT round(n / 3, 2), round(n / 7, 5) FROM {TYPED} ORDER BY 1",
    f"SELECT sum(n / 3), max(n / i), min(i / n), avg(n / 3) FROM {TYPED}",
    f"SELECT n / 3 FROM {TYPED} WHERE n / 3 > 0.5 ORDER BY 1",
    f"SELECT 100.0 * sum(n) / sum(sum(n)) OVER () FROM {TYPED} GROUP BY i ORDER BY 1",
    "SELECT b / 3, b / 7.0 FROM (VALUES (9223372036854775807::bigint), (-5::bigint)) v(b)",
    # BI shapes: share of total, ROLLUP, a CTE's sum / count
    "SELECT g, count(*) * 100.0 / sum(count(*)) OVER () AS pct, "
    "round(100.0 * count(*) / sum(count(*)) OVER (), 2) FROM (VALUES (1), (1), (2)) v(g) "
    "GROUP BY g ORDER BY g",
    "SELECT g, avg(x) FROM (VALUES (1, 2), (1, 3), (2, 5)) v(g, x) GROUP BY ROLLUP (g) "
    "ORDER BY g NULLS LAST",
    "WITH s AS (SELECT g, sum(x) AS total, count(*) AS n FROM (VALUES (1, 2), (1, 3), (2, 5)) "
    "v(g, x) GROUP BY g) SELECT g, total / n, total::numeric / n FROM s ORDER BY g",
    # divisions of divisions (the inner quotient is DECIMAL(38,20): the scalar path)
    f"SELECT n / 3 / 7 / i / 2, (n / 3) / (i / 7.0), avg(n / i) / 3 FROM {TYPED} GROUP BY n, i "
    f"ORDER BY 1",
    # ::numeric without a precision keeps a decimal's digits (not DuckDB's DECIMAL(18,3))
    "SELECT round(avg(x)::numeric, 2), avg(x)::numeric, x::numeric, (x / 3)::numeric, "
    "sum(i)::numeric / 7, i::numeric FROM (SELECT 1.24499::numeric(10,5) AS x, 1 AS i) t "
    "GROUP BY x, i",
    # a zero divisor raises 22012 unless the dividend is NULL
    "SELECT sum(x) / count(x), NULL::int / 0, NULL::int % 0 FROM "
    "(SELECT 1.5::numeric(10,2) AS x WHERE false) t",
    # SELECT DISTINCT: 1.5000000000000000 and 1.50000000000000000000 are one value
    "SELECT DISTINCT avg(x) FROM (VALUES (1, 1.5), (2, 1.0), (2, 2.0)) v(g, x) GROUP BY g",
    f"SELECT DISTINCT n / n FROM {TYPED}",
    # sum() of an aggregate: int2/int4 bigint, bigint numeric
    f"SELECT i, sum(max(i)) OVER (), sum(count(*)) OVER (), sum(sum(i)) OVER (), "
    f"sum(max(i::smallint)) OVER (), sum(max(i::bigint)) OVER () FROM {TYPED} GROUP BY i "
    f"ORDER BY i",
    # extract() numeric (Postgres 14+), date_part() double precision
    f"SELECT extract(year FROM d), extract(dow FROM d), extract(epoch FROM d), "
    f"date_part('year', d), extract(isodow FROM d), extract(week FROM d) FROM {DAYS}",
    f"SELECT extract(epoch FROM ts), extract(second FROM ts), extract(milliseconds FROM ts), "
    f"extract(microseconds FROM ts), date_part('second', ts), date_part('epoch', ts) FROM {DAYS}",
    f"SELECT extract(hour FROM tz), extract(epoch FROM tz), date_part('hour', tz), "
    f"extract(epoch FROM iv), extract(second FROM iv), extract(day FROM iv), "
    f"date_part('epoch', iv), extract(second FROM t), extract(epoch FROM t) FROM {DAYS}",
    f"SELECT extract(day FROM d) / 2, extract(month FROM d) * 2 FROM {DAYS}",
]
NUMERIC_TEXT = [  # numeric results as Postgres prints them (the scale varies by value)
    "SELECT avg(x), avg(x::numeric(10,2)), avg(DISTINCT x) FROM (VALUES (1), (1), (2)) v(x)",
    f"SELECT i, avg(i), avg(n), sum(n) / count(*), sum(i) / sum(n) FROM {NUMBERS} "
    f"GROUP BY i ORDER BY i",
    f"SELECT avg(n) AS a FROM {NUMBERS} GROUP BY i ORDER BY a DESC",
    "SELECT 1 / 30000000.0, 123456789012345678901234.5 / 3, -7.5 / 2, 1 / 7.000000, 0.0 / 3",
    "SELECT -2 / 3000000.0, sum(x) / 3000000.0 FROM (VALUES (-2)) v(x)",
    "SELECT avg(x) FROM (VALUES (123456789012345678), (123456789012345679)) v(x)",
    "SELECT avg(x), round(avg(x), 3) FROM (VALUES (0.00001), (0.00002)) v(x)",
    "SELECT avg(x) FROM (VALUES (1)) v(x) WHERE false",
    # per-row division (vectorized), windowed avg(): Postgres's text, value by value
    f"SELECT i, n / 3, n / i, i / n, n / 7.0, -n / 3, n / 0.3, 1 / n FROM {TYPED} ORDER BY i, n",
    f"SELECT n / 1000000, n / 3000000.0, -0.000001 / n FROM {TYPED} ORDER BY n",
    f"SELECT i, n / i AS q FROM {TYPED} ORDER BY q DESC",
    f"SELECT i, n, avg(n) OVER (PARTITION BY i), avg(i) OVER () FROM {TYPED} ORDER BY i, n",
    # operands beyond 10^12 or with more than 6 decimals: the scalar path
    "SELECT x / 3, x / 7, 3 / x FROM (VALUES (123456789012345678901234.5::numeric(30,1)), "
    "(-100000000000000000000.0::numeric(30,1))) v(x)",
    "SELECT x / 3, x / 7.5 FROM (VALUES (1.0123456789::numeric(20,10)), "
    "(-2.5::numeric(20,10))) v(x)",
    "SELECT b / 7.0, b::numeric(19,0) / 3 FROM (VALUES (9223372036854775807::bigint), "
    "(-5::bigint)) v(b)",
    f"SELECT extract(second FROM ts), extract(epoch FROM ts), extract(epoch FROM iv), "
    f"extract(milliseconds FROM t) FROM {DAYS}",
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]


class _NoTables:
    def latest(self) -> ServedWatermark | None:
        return None


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakeDatabase]:
    warehouse: Path = tmp_path_factory.mktemp("warehouse")
    db = LakeDatabase(DatabaseSettings(warehouse=str(warehouse)), _NoTables())
    yield db
    db.close()


def _postgres_text(pg: ThrowawayPostgres, sql: str) -> list[tuple[str | None, ...]]:
    with pg.connect() as conn:
        conn.adapters.register_loader("numeric", TextLoader)
        rows = conn.execute(sql).fetchall()
        return [tuple(None if v is None else str(v) for v in row) for row in rows]


def _lake_text(db: LakeDatabase, sql: str) -> list[tuple[str | None, ...]]:
    session = db.session()
    try:
        result = session.execute(sql)
        table = result.fetch_all()
        columns = [
            [None if v is None else v.decode() for v in encode_text_column(array, c.pg_type)]
            for array, c in zip(table.columns, result.columns, strict=True)
        ]
        return list(zip(*columns, strict=True))
    finally:
        session.close()


@pytest.mark.parametrize("sql", NUMERIC_TEXT)
def test_numeric_text_equals_postgres(
    pg_server: ThrowawayPostgres, lake: LakeDatabase, sql: str
) -> None:
    assert _lake_text(lake, sql) == _postgres_text(pg_server, sql)


def _postgres(pg: ThrowawayPostgres, sql: str, zone: str) -> tuple[list[int], list[Any]]:
    with pg.connect() as conn:
        conn.execute(f"SET TimeZone = '{zone}'")
        cur = conn.execute(sql)
        return [d.type_code for d in cur.description or ()], list(cur.fetchall())


def _lake(db: LakeDatabase, sql: str, zone: str) -> tuple[list[int], list[Any]]:
    session = db.session()
    try:
        session.execute(f"SET TimeZone = '{zone}'")
        result = session.execute(sql)
        return [c.type_oid for c in result.columns], result.rows()
    finally:
        session.close()


@pytest.mark.parametrize("zone", ZONES)
def test_results_equal_postgres(
    pg_server: ThrowawayPostgres, lake: LakeDatabase, zone: str
) -> None:
    mismatches = []
    for sql in QUERIES:
        expected = _postgres(pg_server, sql, zone)
        got = _lake(lake, sql, zone)
        if got != expected:
            mismatches.append(f"{sql}\n  postgres: {expected}\n  lake:     {got}")
    assert not mismatches, "\n".join(mismatches)


def test_sum_of_int4_past_bigint_raises_like_postgres(lake: LakeDatabase) -> None:
    # Postgres needs 4.3 billion rows for this (22003 "bigint out of range"); DuckDB folds it
    lake_sql = "SELECT sum(x) FROM (SELECT 2147483647::int AS x FROM range(5000000000)) s"
    session = lake.session()
    try:
        with pytest.raises(QueryError) as error:
            session.execute(lake_sql).rows()
    finally:
        session.close()
    assert (error.value.sqlstate, str(error.value)) == ("22003", "bigint out of range")


def test_nested_divisions_bind(lake: LakeDatabase) -> None:
    # each division's macro holds its operand twice (DuckDB expands a nested one as often);
    # small type stand-ins in the typed arguments keep 8 levels at seconds, not hours
    sql = "SELECT a" + " / a" * 8 + " FROM (SELECT 2.5::numeric(10,2) AS a) t"
    session = lake.session()
    try:
        session.execute("SET statement_timeout = '120s'")  # an exponential bind fails, not hangs
        assert session.execute(sql).rows() == [(Decimal("0.0016384"),)]  # 2.5 ** -7
    finally:
        session.close()


def test_unresolved_numeric_macro_falls_back_to_duckdb(tmp_path: Path) -> None:
    # a type combination the macros cannot resolve must not fail the query: it runs again
    # with DuckDB's own division (double precision), as before exact numerics
    db = LakeDatabase(DatabaseSettings(warehouse=str(tmp_path)), _NoTables())
    try:
        db._conn.execute(  # both overloads match (DECIMAL, INTEGER): ambiguous
            "CREATE OR REPLACE MACRO sb_div_operands(tx DECIMAL, ty, px, py, x, y) AS 1, "
            "(tx, ty INTEGER, px, py, x, y) AS 2"
        )
        session = db.session()
        result = session.execute("SELECT 1.5 / 3, avg(x) FROM (VALUES (1), (2)) v(x)")
        assert [c.type_oid for c in result.columns] == [701, 701]
        assert result.rows() == [(0.5, 1.5)]
        session.close()
    finally:
        db.close()
