"""pgAdmin 4's connect sequence and browser tree, on Postgres and on the query server."""

from __future__ import annotations

import pytest

from . import pgadmin4_queries as q
from .conftest import Pair

pytestmark = pytest.mark.integration


def test_connect(pair: Pair) -> None:
    for sql in q.CONNECT[:-1]:
        expected, got = pair.both(sql)
        assert got.rows == expected.rows or sql.startswith("SELECT version")
    expected, got = pair.both(q.DATABASE)
    assert got.values("datname", "datallowconn", "serverencoding", "datistemplate") == (
        expected.values("datname", "datallowconn", "serverencoding", "datistemplate")
    )
    assert got.values("datname") == [(pair.dbname,)]
    expected, got = pair.both(q.RECOVERY)
    assert got.rows == expected.rows == [(False, False)]


def test_browser_tree(pair: Pair) -> None:
    expected, got = pair.both(q.SCHEMAS)
    assert got.values("name") == expected.values("name") == [("public",), ("sales",)]
    pg_oid, lake_oid = pair.namespace_oids("sales")
    expected = pair.postgres(q.TABLES.format(scid=pg_oid))
    got = pair.served(q.TABLES.format(scid=lake_oid))
    assert got.columns == expected.columns
    names: tuple[str, ...] = (
        "name",
        "triggercount",
        "is_partitioned",
        "is_inherits",
        "description",
    )
    assert got.values(*names) == expected.values(*names)
    assert [r[0] for r in got.values("name")] == ["customers", "order_lines"]
    for schema, table in (("public", "orders"), ("sales", "order_lines")):
        pg_oid, lake_oid = pair.table_oids(schema, table)
        expected = pair.postgres(q.COLUMNS.format(tid=pg_oid))
        got = pair.served(q.COLUMNS.format(tid=lake_oid))
        assert got.columns == expected.columns
        names = (
            "name",
            "oid",
            "datatype",
            "displaytypname",
            "not_null",
            "has_default_val",
        )
        assert got.values(*names) == expected.values(*names)


def test_connect_over_the_wire(pair: Pair) -> None:
    """pgAdmin sends its first four statements as one simple-protocol string."""
    with pair.connect() as conn:
        with conn.cursor() as cur:
            cur.execute("; ".join(q.CONNECT[:4]).encode())
            assert cur.statusmessage == "SET"  # the last statement's
        assert conn.execute("SHOW bytea_output").fetchall() == [("hex",)]
        assert conn.execute("SHOW DateStyle").fetchall() == [("ISO, MDY",)]
        rows = conn.execute(q.DATABASE.encode()).fetchall()
        assert [r[1] for r in rows] == [pair.dbname]


def test_view_data(pair: Pair) -> None:
    for schema, table in (("public", "orders"), ("sales", "order_lines"), ("sales", "customers")):
        pg_oid, lake_oid = pair.table_oids(schema, table)
        found = []
        for sql in (q.OBJECT_NAME, q.PRIMARY_KEYS, q.GET_COLUMNS):
            expected = pair.postgres(sql.format(obj_id=pg_oid))
            got = pair.served(sql.format(obj_id=lake_oid))
            assert got.columns == expected.columns
            assert sorted(got.rows) == sorted(expected.rows), sql
            found.append(got.rows)
        keys = [row[0] for row in sorted(found[1], key=lambda r: r[1])]
        assert keys
        sql = q.VIEW_DATA.format(
            table=f"{schema}.{table}", order=", ".join(f"{k} ASC" for k in keys)
        )
        expected, got = pair.both(sql)
        assert got.rows == expected.rows


def test_names_duckdb_reserves(pair: Pair) -> None:
    """Aliases and columns Postgres takes bare and DuckDB reads as keywords (pgAdmin's `at`)."""
    for sql in (
        "SELECT at.id FROM public.orders at ORDER BY 1",
        "SELECT by, map FROM (SELECT 1 AS by, 2 AS map) qualify",
        "SELECT at.attname FROM pg_catalog.pg_attribute at WHERE at.attname = 'customer'",
        "SELECT s.at FROM (SELECT 5 AS at) s(at)",
    ):
        expected, got = pair.both(sql)
        assert got.rows == expected.rows, sql
