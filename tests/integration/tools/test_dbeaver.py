"""DBeaver's connect and navigator queries, on Postgres and on the query server."""

from __future__ import annotations

import pytest

from . import dbeaver_queries as q
from .conftest import Pair

pytestmark = pytest.mark.integration


def test_connect(pair: Pair) -> None:
    expected, got = pair.both(q.CURRENT_DATABASE)
    assert got.rows == expected.rows == [(pair.dbname,)]
    pair.both(q.VERSION)
    expected, got = pair.both(q.DATABASE, [pair.dbname])
    assert got.values("datname", "datistemplate", "datallowconn") == expected.values(
        "datname", "datistemplate", "datallowconn"
    )
    expected, got = pair.both(q.SETTING, ["max_index_keys"])
    assert got.values("name", "setting") == expected.values("name", "setting")
    expected = pair.postgres(q.DATA_TYPES)
    got = pair.served(q.DATA_TYPES)
    assert set(got.names) == set(expected.names)
    assert {"int4", "text", "numeric", "_int4"} <= {r[0] for r in got.values("typname")}


def test_navigator(pair: Pair) -> None:
    expected = pair.postgres(q.SCHEMAS)
    got = pair.served(q.SCHEMAS)
    assert set(got.names) <= set(expected.names) and "nspname" in got.names
    user_schemas = [("public",), ("sales",)]
    assert (
        [r for r in got.values("nspname") if not r[0].startswith(("pg_", "inform"))]
        == ([r for r in expected.values("nspname") if not r[0].startswith(("pg_", "inform"))])
        == user_schemas
    )
    for schema in ("public", "sales"):
        pg_oid, lake_oid = pair.namespace_oids(schema)
        expected, got = pair.postgres(q.TABLES, [pg_oid]), pair.served(q.TABLES, [lake_oid])
        assert set(got.names) == set(expected.names) - {"relfrozenxid", "relminmxid"}
        keys: tuple[str, ...] = (
            "relname",
            "relkind",
            "relhasindex",
            "partition_key",
            "partition_expr",
        )
        assert sorted(got.values(*keys)) == sorted(expected.values(*keys))
        expected, got = pair.postgres(q.COLUMNS, [pg_oid]), pair.served(q.COLUMNS, [lake_oid])
        assert set(got.names) == set(expected.names) - {"attmissingval"}
        keys = (
            "relname",
            "attname",
            "attnum",
            "atttypid",
            "attnotnull",
            "def_value",
        )
        # DBeaver shows the columns with attnum > 0 (Postgres also lists system columns)
        columns = sorted(r for r in expected.values(*keys) if r[2] > 0)
        assert sorted(got.values(*keys)) == columns
        expected = pair.postgres(q.CONSTRAINTS, [pg_oid])
        got = pair.served(q.CONSTRAINTS, [lake_oid])
        keys = ("conname", "contype", "tabrelname", "conkey")
        assert sorted(got.values(*keys)) == sorted(expected.values(*keys))
        expected, got = pair.postgres(q.INDEXES, [pg_oid]), pair.served(q.INDEXES, [lake_oid])
        assert set(got.names) == set(expected.names)
        keys = ("relname", "tabrelname", "indisprimary", "indisunique", "indnatts", "pred_expr")
        assert got.values(*keys) == expected.values(*keys)
    expected, got = pair.both(q.PREVIEW)
    assert sorted(got.rows) == sorted(expected.rows)
