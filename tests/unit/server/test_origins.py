"""Which result columns come straight from a table: SQL in, origins out."""

from __future__ import annotations

from typing import Any

import pglast
import pytest

from streambed.server import pgtypes
from streambed.server.origins import ColumnOrigin, Columns, result_origins


def _parse(sql: str) -> Any:
    """The one statement of `sql`."""
    stmt = pglast.parse_sql(sql)[0].stmt
    assert stmt is not None
    return stmt


JSONB = pgtypes.JSONB
TABLES: dict[str, Columns] = {
    "orders": [
        ("id", ColumnOrigin(100, 1)),
        ("note", ColumnOrigin(100, 2)),
        ("data", ColumnOrigin(100, 3, JSONB)),
    ],
    "customers": [("id", ColumnOrigin(200, 1)), ("email", ColumnOrigin(200, 2))],
}


def _lookup(schema: str | None, name: str) -> Columns | None:
    return TABLES.get(name) if schema in (None, "public") else None


def _origins(sql: str) -> list[tuple[int, int] | None] | None:
    found = result_origins(_parse(sql), _lookup)
    if found is None:
        return None
    return [None if o is None else (o.table_oid, o.column_number) for o in found]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM orders", [(100, 1), (100, 2), (100, 3)]),
        ("SELECT note, id + 1, data AS d FROM public.orders", [(100, 2), None, (100, 3)]),
        (
            "SELECT o.*, c.email FROM orders o JOIN customers c ON c.id = o.id",
            [(100, 1), (100, 2), (100, 3), (200, 2)],
        ),
        ("SELECT * FROM orders, customers", [(100, 1), (100, 2), (100, 3), (200, 1), (200, 2)]),
        ("SELECT id FROM orders JOIN customers USING (id)", [None]),  # ambiguous here
        ("SELECT x.id FROM (SELECT id FROM orders) x", [None]),
        ("SELECT t.a FROM orders AS t(a, b)", [(100, 1)]),
        ("SELECT 1, count(*) FROM orders", [None, None]),
        ("SELECT email FROM customers, (SELECT 1) s", [(200, 2)]),
        ("SELECT * FROM orders JOIN customers USING (id)", None),  # width unknown
        ("SELECT * FROM (SELECT 1) s", None),
        ("WITH orders AS (SELECT 1 AS id) SELECT * FROM orders", None),  # a CTE, not the table
        ("SELECT id FROM orders UNION SELECT id FROM customers", None),
        ("SELECT * FROM elsewhere.orders", None),
    ],
)
def test_origins(sql: str, expected: list[tuple[int, int] | None] | None) -> None:
    assert _origins(sql) == expected


def test_the_declared_type_comes_along() -> None:
    found = result_origins(_parse("SELECT data FROM orders"), _lookup)
    assert found is not None and found[0] is not None and found[0].pg_type == JSONB
