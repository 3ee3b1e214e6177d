"""Metabase's sync queries, on Postgres and on the query server."""

from __future__ import annotations

import psycopg
import pytest

from streambed.server.database import QueryError

from . import metabase_queries as q
from .conftest import Pair

pytestmark = pytest.mark.integration


def test_sync(pair: Pair) -> None:
    expected, got = pair.both(q.TIMEZONE)  # the zone itself is the server's own
    assert len(got.rows) == len(expected.rows) == 1
    expected, got = pair.both(q.TABLE_PRIVILEGES)
    assert sorted(got.rows) == sorted(expected.rows)
    assert len(got.rows) == 3 and all(row[5] for row in got.rows)  # select
    expected, got = pair.both(q.TABLES)
    assert got.values("schema", "name", "type") == expected.values("schema", "name", "type")
    assert len(got.rows) == 3
    expected, got = pair.both(q.FIELDS)
    keys = ("name", "database-type", "database-position", "table-schema", "table-name", "pk?",
            "field-comment", "database-is-auto-increment")  # fmt: skip
    assert got.values(*keys) == expected.values(*keys)
    assert len(got.rows) == 9
    expected, got = pair.both(q.FKS)
    assert got.rows == expected.rows
    expected, got = pair.both(q.INDEXES)
    assert sorted(got.rows) == sorted(expected.rows)
    expected, got = pair.both(q.ENUM_TYPES)
    assert got.rows == expected.rows == []


def test_format(pair: Pair) -> None:
    for sql in (
        "SELECT format('%I.%I', 'sales', 'Order Lines') AS f",
        "SELECT format('%s-%s %%', 1, NULL) AS f",
        "SELECT format('%L and %L', 'it''s', NULL) AS f",
        "SELECT format('%2$s %1$s %s', 'a', 'b') AS f",
        "SELECT format('%I %I %I %I', 'select', 'user', 'name', 'Abc') AS f",
        "SELECT format('%s|%s|%L', 1.50, true, 'a\\b') AS f",
        "SELECT format($1, 'x') AS f",
        "SELECT format('[%5s|%-5s|%2s|%3$-6I]', 'ab', 'cd', 'Efgh') AS f",
        "SELECT format('\"%s\".\"%s\"', nspname, 'x') AS f FROM pg_namespace "
        "WHERE nspname = 'sales'",
    ):
        expected, got = pair.both(sql, ["<%s>"] if "$1" in sql else None)
        assert got.rows == expected.rows, sql


def test_format_errors(pair: Pair) -> None:
    for sql in (
        "SELECT format('%s')",
        "SELECT format('%I', NULL)",
        "SELECT format('%x', 1)",
        "SELECT format('abc %')",
        "SELECT format('%0$s', 1)",
    ):
        with pytest.raises(psycopg.Error) as expected:
            pair.postgres(sql)
        with pytest.raises(QueryError) as got:
            pair.served(sql)
        assert got.value.sqlstate == expected.value.sqlstate, sql


def test_bare_nulls_are_text(pair: Pair) -> None:
    for sql in (
        "SELECT NULL AS a, NULL, 1 AS b",
        "SELECT * FROM (SELECT NULL AS n, NULL) s",
        "WITH t AS (SELECT NULL AS role, 'x' AS name) SELECT t.* FROM t",
        "SELECT NULL AS n UNION ALL SELECT 1",
        "SELECT 1 AS n UNION ALL SELECT NULL ORDER BY 1",
    ):
        expected, got = pair.both(sql)
        assert got.rows == expected.rows, sql
