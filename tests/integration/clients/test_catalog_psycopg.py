"""The catalog and result descriptions through psycopg: each query answered by the query
server as the source Postgres answers it (a foreign key to a table that is not replicated
left out)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.integration.clients.conftest import Setup

pytestmark = pytest.mark.integration

TABLES = "('customers', 'orders')"


def _both(setup: Setup, sql: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with psycopg.connect(setup.source_url) as source:
        expected = source.execute(sql).fetchall()
    with psycopg.connect(_url(setup)) as served:
        actual = served.execute(sql).fetchall()
    return expected, actual


def _url(setup: Setup) -> str:
    return f"host=127.0.0.1 port={setup.port} dbname={setup.source_database} user=x"


def test_pg_attribute_has_the_declared_types_and_not_null(setup: Setup) -> None:
    expected, actual = _both(
        setup,
        "SELECT c.relname, a.attnum, a.attname, a.atttypid, a.atttypmod, a.attnotnull, "
        "format_type(a.atttypid, a.atttypmod), a.attndims "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        f"WHERE c.relname IN {TABLES} AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY 1, 2",
    )
    assert actual == expected
    types = {row[2]: row[6] for row in actual}
    assert types["email"] == "character varying(20)" and types["tags"] == "integer[]"
    assert types["profile"] == "jsonb" and types["token"] == "uuid"
    assert types["born"] == "timestamp(3) without time zone" and types["code"] == "character(4)"


def test_pg_constraint_has_the_foreign_key_to_a_replicated_table_only(setup: Setup) -> None:
    sql = (
        "SELECT k.conname, k.contype, c.relname, f.relname, k.conkey, k.confkey, "
        "k.confupdtype, k.confdeltype, k.confmatchtype, pg_get_constraintdef(k.oid) "
        "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
        "LEFT JOIN pg_class f ON f.oid = k.confrelid "
        f"WHERE c.relname IN {TABLES} AND k.contype IN ('p', 'f') ORDER BY 1"
    )
    expected, actual = _both(setup, sql)
    assert [r[0] for r in expected] == [
        "customers_pkey", "orders_customer_id_fkey", "orders_outside_id_fkey", "orders_pkey",
    ]  # fmt: skip
    assert actual == [r for r in expected if r[0] != "orders_outside_id_fkey"]
    fk = next(r for r in actual if r[1] == "f")
    assert fk[9] == "FOREIGN KEY (customer_id) REFERENCES customers(id) ON DELETE CASCADE"


def test_information_schema_columns(setup: Setup) -> None:
    expected, actual = _both(
        setup,
        "SELECT table_name, column_name, ordinal_position, data_type, udt_name, "
        "character_maximum_length, is_nullable, numeric_precision, numeric_scale, "
        "datetime_precision FROM information_schema.columns "
        f"WHERE table_schema = 'public' AND table_name IN {TABLES} ORDER BY 1, 3",
    )
    assert actual == expected


def test_information_schema_constraints(setup: Setup) -> None:
    queries = [
        "SELECT constraint_name, table_name, constraint_type, is_deferrable, "
        "initially_deferred FROM information_schema.table_constraints "
        f"WHERE table_name IN {TABLES} AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY') "
        "ORDER BY 1",
        "SELECT constraint_name, table_name, column_name, ordinal_position, "
        "position_in_unique_constraint FROM information_schema.key_column_usage "
        f"WHERE table_name IN {TABLES} ORDER BY 1, 4",
        "SELECT constraint_name, unique_constraint_schema, unique_constraint_name, "
        "match_option, update_rule, delete_rule FROM information_schema.referential_constraints "
        "WHERE constraint_schema = 'public' ORDER BY 1",
    ]
    for sql in queries:
        expected, actual = _both(setup, sql)
        assert actual == [r for r in expected if r[0] != "orders_outside_id_fkey"], sql
        assert actual


def _described(url: str, sql: str) -> list[tuple[str, int, int, str | None, int]]:
    """Per result column: name, type OID, typmod, its table's name (from the table OID),
    column number."""
    with psycopg.connect(url) as conn:
        cursor = conn.execute(sql)
        result = cursor.pgresult
        assert result is not None
        out = []
        for i in range(result.nfields):
            table = None
            if result.ftable(i):
                row = conn.execute(
                    "SELECT relname FROM pg_class WHERE oid = %s", (result.ftable(i),)
                ).fetchone()
                table = row[0] if row else "?"
            name = (result.fname(i) or b"").decode()
            out.append((name, result.ftype(i), result.fmod(i), table, result.ftablecol(i)))
        return out


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM customers",
        "SELECT c.email, o.note, o.id + 1, c.tags, o.* FROM orders o "
        "JOIN customers c ON c.id = o.customer_id",
        "SELECT profile AS p, token, count(*) FROM customers GROUP BY profile, token",
    ],
)
def test_result_descriptions_name_the_table_and_column(setup: Setup, sql: str) -> None:
    served = _described(_url(setup), sql)
    assert served == _described(setup.source_url, sql)
    assert any(table for _, _, _, table, _ in served)


def test_values_of_declared_types_load_as_on_postgres(setup: Setup) -> None:
    expected, actual = _both(setup, "SELECT * FROM customers ORDER BY id")
    assert actual == expected
    assert isinstance(actual[0][4], dict) and actual[0][3] == [1, 2, 3]


def test_names_postgres_accepts_bare(setup: Setup) -> None:
    for sql in (
        "SELECT by, at FROM orders ORDER BY id",
        "SELECT note AS at, id AS by FROM orders AS columns ORDER BY columns.id",
    ):
        expected, actual = _both(setup, sql)
        assert actual == expected, sql


def test_index_keys_are_vectors(setup: Setup) -> None:
    expected, actual = _both(
        setup,
        "SELECT i.indkey, i.indkey[0], 1 = ANY(i.indkey), array_length(i.indkey, 1) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
        f"WHERE c.relname IN {TABLES} ORDER BY c.relname",
    )
    assert actual == expected
    assert actual[0][0] == "1" and actual[0][1] == 1
