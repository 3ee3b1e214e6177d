"""Npgsql's type loading at connect (also Power BI's), on Postgres and on the query server."""

from __future__ import annotations

import pytest

from . import npgsql_queries as q
from .conftest import Pair

pytestmark = pytest.mark.integration


def test_connect_loads_types(pair: Pair) -> None:
    pair.both(q.VERSION)
    expected, got = pair.both(q.LOAD_TYPES)
    # every type the query server describes columns with is loaded as Postgres loads it
    pg_types = {r[2]: (r[0], r[3]) for r in expected.rows}  # typname -> (schema, typtype)
    served = {r[2]: (r[0], r[3]) for r in got.rows}
    for name in ("bool", "int2", "int4", "int8", "numeric", "text", "varchar", "timestamptz",
                 "date", "bytea", "uuid", "jsonb", "_int4", "_text", "_numeric"):  # fmt: skip
        assert served.get(name) == pg_types[name], name
    arrays = {r[2] for r in got.rows if r[3] == "a"}
    assert arrays and all(name.startswith("_") for name in arrays)
    # an array's element type is loaded before it (Npgsql resolves it by oid)
    seen: set[int] = set()
    for row in got.rows:
        assert row[5] is None or row[5] in seen, row
        seen.add(row[1])
    for sql in (q.LOAD_COMPOSITES, q.LOAD_ENUMS):
        expected, got = pair.both(sql)
        assert got.rows == expected.rows == []


def test_connect_batch_over_the_wire(pair: Pair) -> None:
    """Npgsql sends the four queries as one simple-protocol batch."""
    with pair.connect() as conn, conn.cursor() as cur:
        cur.execute("\n".join(q.CONNECT).encode())
        counts = []
        while True:
            counts.append(len(cur.fetchall()))
            if not cur.nextset():
                break
    expected = [len(pair.postgres(sql).rows) for sql in q.CONNECT]
    assert len(counts) == 4 and counts[0] == expected[0] == 1 and counts[2:] == expected[2:]
    assert counts[1] > 30


def test_get_schema_collections(pair: Pair) -> None:
    expected, got = pair.both(q.SCHEMATA)
    user = [r for r in expected.rows if r[1] in ("public", "sales")]
    assert sorted(r[:2] for r in got.rows if r[1] in ("public", "sales")) == sorted(
        r[:2] for r in user
    )
    expected, got = pair.both(q.TABLES)
    assert sorted(got.rows) == sorted(expected.rows)
    assert len(got.rows) == 3
    for schema in ("public", "sales"):
        expected, got = pair.both(q.COLUMNS, [schema])
        # name, position, nullable, type, precision, radix, scale, datetime precision
        picked = [(r[2], r[3], r[4], r[6], r[7], r[10], r[11], r[12], r[13]) for r in got.rows]
        wanted = [(r[2], r[3], r[4], r[6], r[7], r[10], r[11], r[12], r[13]) for r in expected.rows]
        assert sorted(picked) == sorted(wanted)
    for sql, count in ((q.PRIMARY_KEYS, 3), (q.CONSTRAINT_COLUMNS, 4)):
        expected, got = pair.both(sql)
        # Postgres lists its system catalogs' keys too
        user = sorted(r for r in expected.rows if r[4] in ("public", "sales"))
        assert sorted(got.rows) == user and len(user) == count
