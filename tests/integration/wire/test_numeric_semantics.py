"""Postgres 15 is the oracle for numeric results over a real Iceberg table: the same queries
through the query port and on a Postgres table holding the same rows, compared as psycopg
sees them (type OID and value).

Covers per-row numeric division (price / 3, price / qty), avg() inside expressions, in a CTE,
as a window, SELECT DISTINCT over exact quotients, sum() of an aggregate, extract() and
date_part(). Bare select-list items must match Postgres's text exactly; a quotient inside an
expression is DECIMAL(38, 20), equal in value with more trailing zeros."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg.types.string import TextLoader

from streambed.server.wire.server import QueryServer
from tests.fixtures.postgres import ThrowawayPostgres
from tests.integration.wire.conftest import ITEM_ROWS, conninfo, item_rows

pytestmark = pytest.mark.integration

# rows 1..ITEM_ROWS: price = id / 100 (numeric(10,2)), qty = id % 50, ratio = id / 8
SAME_TEXT = [
    "SELECT id, price / 3, price / qty, qty / price, price / 7.0, -price / 1000000, "
    "price / 0.3 FROM items WHERE qty > 0 ORDER BY id LIMIT 300",
    "SELECT id, price / (qty + 1) AS q FROM items ORDER BY q DESC, id LIMIT 50",
    "SELECT id, id / 3, id / 3.0, ratio / 2 FROM items ORDER BY id LIMIT 20",
    "SELECT qty, avg(price), avg(id), sum(price) / count(*) FROM items GROUP BY qty ORDER BY qty",
    "SELECT id, avg(price) OVER (PARTITION BY qty), avg(qty) OVER () FROM items "
    "ORDER BY id LIMIT 120",
    "SELECT extract(year FROM day), extract(epoch FROM seen), extract(second FROM seen), "
    "date_part('dow', day), date_part('epoch', seen) FROM items ORDER BY id LIMIT 30",
    "SELECT qty, sum(max(qty)) OVER (), sum(count(*)) OVER () FROM items GROUP BY qty "
    "ORDER BY qty LIMIT 5",
    # sorted by the quotient (computed in the query) or not (computed by the server)
    "SELECT qty, avg(price) AS a FROM items GROUP BY qty ORDER BY a DESC, qty",
    "SELECT qty, avg(price), sum(price) / count(*) FROM items GROUP BY qty ORDER BY 2, 1",
    "SELECT qty, avg(price) AS a, sum(price) / max(id) FROM items GROUP BY qty ORDER BY qty",
    # NULL operands, NULL / 0, an empty input
    "SELECT id, NULLIF(price, price) / 0, price / NULLIF(qty, qty), avg(NULLIF(qty, qty)) "
    "OVER () FROM items ORDER BY id LIMIT 5",
    "SELECT sum(price) / count(*), avg(price), avg(qty) FROM items WHERE false",
]
SAME_VALUE = [  # a quotient inside an expression: DECIMAL(38, 20), more trailing zeros
    "SELECT qty, avg(price) * 100, round(avg(price) * 2, 1), avg(qty) + 1 FROM items "
    "GROUP BY qty ORDER BY qty",
    "WITH t AS (SELECT qty, avg(price) AS a FROM items GROUP BY qty) "
    "SELECT qty, a, a * 2 FROM t ORDER BY qty",
    "SELECT (SELECT avg(price) FROM items), x FROM (SELECT avg(qty) AS x FROM items) s",
    "SELECT count(*), sum(price / (qty + 1)), max(price / (qty + 1)) FROM items "
    "WHERE price / (qty + 1) > 1",
    "SELECT qty FROM items GROUP BY qty HAVING avg(price) > 10 ORDER BY qty",
    "SELECT DISTINCT round(price / 3, 1) AS r FROM items ORDER BY r LIMIT 20",
    "SELECT DISTINCT avg(price) FROM items GROUP BY qty % 2 ORDER BY 1",
    "SELECT qty, 100.0 * sum(price) / sum(sum(price)) OVER () FROM items GROUP BY qty ORDER BY qty",
    "SELECT interval '1 day' / 2, interval '1 month 1 day' / 3, avg(day - DATE '2024-01-01') "
    "/ 2, max(seen - day) / 3 FROM items",
]


@pytest.fixture(scope="module")
def pg_items(pg_server: ThrowawayPostgres) -> Iterator[ThrowawayPostgres]:
    rows = item_rows(ITEM_ROWS).select(["id", "price", "qty", "ratio", "day", "seen"])
    with pg_server.connect() as conn:
        conn.execute(
            "CREATE TABLE items (id bigint, price numeric(10,2), qty int, ratio float8, "
            "day date, seen timestamp)"
        )
        with conn.cursor().copy("COPY items FROM STDIN") as copy:
            for row in rows.to_pylist():
                copy.write_row(tuple(row.values()))
        conn.commit()
    yield pg_server
    with pg_server.connect() as conn:
        conn.execute("DROP TABLE items")
        conn.commit()


def _fetch(conn: psycopg.Connection[Any], sql: str) -> tuple[list[int], list[tuple[Any, ...]]]:
    cur = conn.execute(sql)
    return [d.type_code for d in cur.description or ()], list(cur.fetchall())


def _both(
    pg: ThrowawayPostgres, server: QueryServer, sql: str, as_text: bool
) -> tuple[tuple[list[int], list[Any]], tuple[list[int], list[Any]]]:
    with pg.connect() as expected_conn, psycopg.connect(conninfo(server)) as got_conn:
        for conn in (expected_conn, got_conn):
            if as_text:
                conn.adapters.register_loader("numeric", TextLoader)
        return _fetch(expected_conn, sql), _fetch(got_conn, sql)


@pytest.mark.parametrize("sql", SAME_TEXT)
def test_text_and_type_equal_postgres(
    pg_items: ThrowawayPostgres, server: QueryServer, sql: str
) -> None:
    expected, got = _both(pg_items, server, sql, as_text=True)
    assert got == expected


@pytest.mark.parametrize("sql", SAME_VALUE)
def test_value_and_type_equal_postgres(
    pg_items: ThrowawayPostgres, server: QueryServer, sql: str
) -> None:
    expected, got = _both(pg_items, server, sql, as_text=False)
    assert got == expected  # Decimal("1.50") == Decimal("1.5000")


def test_trailing_zeros_inside_expressions(
    pg_items: ThrowawayPostgres, server: QueryServer
) -> None:
    # the documented difference: same value, DECIMAL(38, 20)'s scale instead of Postgres's
    sql = "SELECT avg(price) * 100 FROM items WHERE id IN (150, 250)"
    expected, got = _both(pg_items, server, sql, as_text=True)
    assert expected == ([1700], [("200.0000000000000000",)])
    assert got == ([1700], [("200.00000000000000000000",)])
    assert Decimal(got[1][0][0]) == Decimal(expected[1][0][0])


PARAMETERIZED = [  # bound as numeric, int and text in both protocols, as psycopg sends them
    ("SELECT id, price / %s FROM items ORDER BY id LIMIT 5", [Decimal("3")]),
    ("SELECT id, price / %s, qty / %s FROM items ORDER BY id LIMIT 5", [3, 2]),
    ("SELECT %s / qty FROM items WHERE qty > 0 ORDER BY id LIMIT 5", [Decimal("7.5")]),
    ("SELECT sum(price) / %s, count(*) / %s FROM items", [2, Decimal("7")]),
    ("SELECT %s::numeric / 3", ["1.5"]),
]


@pytest.mark.parametrize("prepare", [False, True])
@pytest.mark.parametrize(("sql", "params"), PARAMETERIZED)
def test_parameters_equal_postgres(
    pg_items: ThrowawayPostgres,
    server: QueryServer,
    sql: str,
    params: list[Any],
    prepare: bool,
) -> None:
    with pg_items.connect() as expected_conn, psycopg.connect(conninfo(server)) as got_conn:
        results = []
        for conn in (expected_conn, got_conn):
            conn.adapters.register_loader("numeric", TextLoader)
            cur = conn.execute(sql, params, prepare=prepare)
            results.append(([d.type_code for d in cur.description or ()], cur.fetchall()))
    assert results[1] == results[0]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, price / (qty - qty) FROM items",
        "SELECT qty, sum(price) / (count(*) - count(*)) FROM items GROUP BY qty",
        "SELECT id, price / (qty - qty) AS q FROM items ORDER BY q",
    ],
)
def test_zero_divisor_is_22012_as_in_postgres(
    pg_items: ThrowawayPostgres, server: QueryServer, sql: str
) -> None:
    states = []
    with pg_items.connect() as expected_conn, psycopg.connect(conninfo(server)) as got_conn:
        for conn in (expected_conn, got_conn):
            with pytest.raises(psycopg.errors.DivisionByZero) as error:
                conn.execute(sql).fetchall()
            states.append(error.value.sqlstate)
    assert states == ["22012", "22012"]
