"""Analytical queries over replicated tables give the same answers through streambed's query
port as on the source Postgres: joins, group by, window functions, decimals, timestamps with
zones, NULLs. Ordered queries compare in order; values compare as psycopg decodes them.

Known differences (docs/query-server.md) are left out on purpose: avg() and numeric division
inside larger expressions or computed per row are double precision instead of numeric.
Select-list avg() and numeric division of aggregates, and timestamptz arithmetic in the
session TimeZone, are compared."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.integration.gateway.conftest import Gateway

pytestmark = pytest.mark.integration

QUERIES = [
    "SELECT count(*), sum(amount), min(amount), max(amount), sum(discount), count(status), "
    "min(placed_at), max(placed_at), min(shipped_at) FROM shop.orders",
    "SELECT c.country, count(*) AS orders, sum(o.amount) AS total, max(o.placed_at) "
    "FROM shop.orders o JOIN shop.customers c ON c.id = o.customer_id "
    "GROUP BY c.country ORDER BY c.country",
    "SELECT c.id, c.name, count(o.id), sum(o.amount) FROM shop.customers c "
    "LEFT JOIN shop.orders o ON o.customer_id = c.id GROUP BY c.id, c.name "
    "ORDER BY count(o.id) DESC, c.id LIMIT 40",
    "SELECT o.customer_id, count(*) FROM shop.orders o "
    "WHERE NOT EXISTS (SELECT 1 FROM shop.customers c WHERE c.id = o.customer_id) "
    "GROUP BY o.customer_id ORDER BY o.customer_id",
    "SELECT status, count(*), sum(amount), round(sum(weight)::numeric, 3) FROM shop.orders "
    "GROUP BY status ORDER BY status DESC",
    "SELECT status FROM shop.orders GROUP BY status ORDER BY status NULLS FIRST",
    "SELECT id, customer_id, amount, "
    "sum(amount) OVER (PARTITION BY customer_id ORDER BY id) AS running, "
    "row_number() OVER (PARTITION BY customer_id ORDER BY amount DESC, id) AS rn, "
    "rank() OVER (ORDER BY amount DESC) AS rnk "
    "FROM shop.orders WHERE customer_id <= 5 ORDER BY customer_id, id",
    "SELECT id, amount, lag(amount) OVER w, lead(status, 2) OVER w, "
    "first_value(id) OVER w, count(*) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) "
    "FROM shop.orders WHERE id <= 60 WINDOW w AS (ORDER BY id) ORDER BY id",
    "SELECT customer_id, amount, dense_rank() OVER (PARTITION BY customer_id ORDER BY amount) "
    "FROM shop.orders WHERE customer_id BETWEEN 10 AND 12 ORDER BY customer_id, amount, id",
    "SELECT id, amount * 3, amount - discount, amount * discount, weight * 2, "
    "id / 7, id % 7, -id / 4 FROM shop.orders WHERE id <= 30 ORDER BY id",
    "SELECT id, placed_at, shipped_at, placed_at + interval '90 minutes', "
    "shipped_at - interval '1 day', extract(epoch FROM placed_at) "
    "FROM shop.orders WHERE id % 250 = 0 ORDER BY placed_at",
    "SELECT date_trunc('hour', shipped_at) AS h, count(*) FROM shop.orders "
    "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10",
    "SELECT customer_id, string_agg(status, ',' ORDER BY id) FROM shop.orders "
    "WHERE customer_id < 4 GROUP BY customer_id ORDER BY customer_id",
    "SELECT coalesce(status, 'none'), 'x' || status, status IS NULL, "
    "CASE WHEN weight > 100 THEN 'heavy' WHEN weight IS NULL THEN NULL ELSE 'light' END "
    "FROM shop.orders WHERE id <= 50 ORDER BY id",
    "WITH top AS (SELECT customer_id, sum(amount) AS total FROM shop.orders "
    "GROUP BY customer_id HAVING sum(amount) > 12000) "
    "SELECT c.country, count(*), sum(t.total) FROM top t LEFT JOIN shop.customers c "
    "ON c.id = t.customer_id GROUP BY c.country ORDER BY c.country NULLS FIRST",
    "SELECT joined, count(*) FROM shop.customers WHERE joined < DATE '2021-01-01' "
    "GROUP BY joined ORDER BY joined DESC LIMIT 15",
    "SELECT count(DISTINCT customer_id), count(DISTINCT status), "
    "sum(amount) FILTER (WHERE status = 'paid') FROM shop.orders",
    "SELECT status, avg(amount), round(avg(amount), 2), avg(customer_id), avg(weight), "
    "round(100.0 * count(*) / 3, 3) FROM shop.orders GROUP BY status ORDER BY status",
    "SELECT status, sum(amount) / count(*), round(100.0 * count(*) / 5000, 3), "
    "sum(amount) / sum(customer_id), sum(weight) / count(*) FROM shop.orders "
    "GROUP BY status ORDER BY status",
    "SELECT placed_at::date AS day, count(*), min(extract(hour FROM placed_at)) "
    "FROM shop.orders GROUP BY 1 ORDER BY 1 LIMIT 20",
]


def _rows(conninfo: str, sql: str, timezone: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"SET TimeZone = '{timezone}'")
        cur = conn.execute(sql)
        names = [d.name for d in cur.description or ()]
        return names, list(cur.fetchall())


@pytest.mark.parametrize("timezone", ["UTC", "America/New_York"])
def test_analytical_queries_match_the_source(loaded: Gateway, timezone: str) -> None:
    mismatches = []
    for sql in QUERIES:
        expected = _rows(loaded.source_url, sql, timezone)
        try:
            got = _rows(loaded.conninfo(), sql, timezone)
        except psycopg.Error as e:
            mismatches.append(f"{sql}\n  streambed failed: {e.sqlstate} {e}")
            continue
        if not expected[1]:
            mismatches.append(f"no rows on the source: {sql}")
        elif got != expected:
            mismatches.append(f"{sql}\n  source:    {expected}\n  streambed: {got}"[:3000])
    assert not mismatches, "\n".join(mismatches)
