"""Grafana's query editor pickers, on Postgres and on the query server."""

from __future__ import annotations

import pytest

from . import grafana_queries as q
from .conftest import Pair

pytestmark = pytest.mark.integration


def test_pickers(pair: Pair) -> None:
    expected, got = pair.both(q.VERSION)
    assert got.rows == expected.rows == [(1500,)] or got.rows == expected.rows
    expected, got = pair.both(q.TIMESCALE)
    assert got.rows == expected.rows == []
    expected, got = pair.both(q.SCHEMAS)
    assert got.rows == expected.rows == [("public",), ("sales",)]
    expected, got = pair.both(q.TABLES)
    assert got.rows == expected.rows == [("orders",), ("sales.customers",), ("sales.order_lines",)]
    expected, got = pair.both(q.TABLES_OF_SCHEMA)
    assert got.rows == expected.rows
    for table in ("orders", "sales.order_lines", "customers"):
        expected, got = pair.both(q.COLUMNS.replace("{table}", table))
        assert sorted(got.rows) == sorted(expected.rows), table
    assert len(pair.served(q.COLUMNS.replace("{table}", "sales.order_lines")).rows) == 3


def test_parse_ident_and_string_to_array(pair: Pair) -> None:
    for sql in (
        "SELECT parse_ident('Sales.\"Order Lines\"') AS p",
        "SELECT parse_ident('a.\"b.c\".D') AS p",
        "SELECT s[2] AS x FROM string_to_array('a,b,c', ',') s",
        "SELECT s FROM string_to_array('a,b', ',') AS s",
    ):
        expected, got = pair.both(sql)
        assert got.rows == expected.rows, sql
