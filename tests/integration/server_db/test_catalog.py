"""Catalog queries real clients send (psql 15 meta-commands, SQLAlchemy 2 inspector)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from streambed.server.database import DbSession, LakeDatabase

from .psql15_queries import QUERIES

HERE = Path(__file__).parent


def run(session: DbSession, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    return session.execute(sql, params).rows()


def table_oid(session: DbSession, schema: str, name: str) -> int:
    rows = run(
        session,
        QUERIES["\\d t"][0].replace("^(t)$", f"^({name})$"),
    )
    matches = [r for r in rows if r[1] == schema]
    assert matches, rows
    return int(matches[0][0])


def test_psql_dt(db: LakeDatabase) -> None:
    session = db.session()
    assert run(session, QUERIES["\\dt"][0]) == [("public", "orders", "table", "streambed")]
    assert run(session, QUERIES["\\dt sales.*"][0]) == [
        ("sales", "customers", "table", "streambed"),
        ("sales", "order_lines", "table", "streambed"),
    ]
    assert run(session, QUERIES["\\d"][0]) == [("public", "orders", "table", "streambed")]


def test_psql_dn_and_l(db: LakeDatabase) -> None:
    session = db.session()
    assert run(session, QUERIES["\\dn"][0]) == [("public", "streambed"), ("sales", "streambed")]
    rows = run(session, QUERIES["\\l"][0])
    assert [r[:3] for r in rows] == [("streambed", "streambed", "UTF8")]


def test_psql_describe_table(db: LakeDatabase) -> None:
    session = db.session()
    for command in ("\\d t", "\\d+ t"):
        queries = QUERIES[command]
        found = run(session, queries[0].replace("^(t)$", "^(orders)$"))
        assert [(r[1], r[2]) for r in found] == [("public", "orders")]
        oid = str(found[0][0])
        results = [run(session, q.replace("16385", oid)) for q in queries[1:]]
        table_props, columns, indexes = results[0], results[1], results[2]
        assert table_props[0][1] == "r" and table_props[0][2] is True  # relkind, relhasindex
        assert [(*c[:2], c[3]) for c in columns] == [
            ("id", "integer", True),
            ("customer", "text", False),
            ("amount", "numeric(10,2)", False),
            ("created_at", "timestamp with time zone", False),
        ]
        assert [(i[0], i[1], i[5], i[6]) for i in indexes] == [
            (
                "orders_pkey",
                True,
                "CREATE UNIQUE INDEX orders_pkey ON public.orders USING btree (id)",
                "PRIMARY KEY (id)",
            )
        ]
        assert all(r == [] for r in results[3:])  # policies, statistics, publications, ...


def _sa(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """SQLAlchemy's psycopg %(name)s placeholders as $n with positional values."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in order:
            order.append(name)
        return f"${order.index(name) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql).replace("%%", "%")
    return text, [params[name] for name in order]


SA_TABLE_NAMES = """SELECT pg_catalog.pg_class.relname
FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace
WHERE pg_catalog.pg_class.relkind = ANY (ARRAY[%(param_1)s::VARCHAR, %(param_2)s::VARCHAR]) AND pg_catalog.pg_class.relpersistence != %(relpersistence_1)s::VARCHAR AND pg_catalog.pg_table_is_visible(pg_catalog.pg_class.oid) AND pg_catalog.pg_namespace.nspname != %(nspname_1)s::VARCHAR"""  # noqa: E501
SA_SCHEMAS = """SELECT pg_catalog.pg_namespace.nspname
FROM pg_catalog.pg_namespace
WHERE (pg_catalog.pg_namespace.nspname NOT LIKE %(nspname_1)s::VARCHAR || '%%' ESCAPE '/') ORDER BY pg_catalog.pg_namespace.nspname"""  # noqa: E501
SA_HAS_TABLE = """SELECT pg_catalog.pg_class.relname
FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace
WHERE pg_catalog.pg_class.relname IN (%(table_names_1)s::VARCHAR) AND pg_catalog.pg_class.relkind = ANY (ARRAY[%(param_1)s::VARCHAR, %(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR]) AND pg_catalog.pg_table_is_visible(pg_catalog.pg_class.oid) AND pg_catalog.pg_namespace.nspname != %(nspname_1)s::VARCHAR"""  # noqa: E501
SA_COLUMNS = (HERE / "sqlalchemy2_columns.sql").read_text()
SA_OIDS = """SELECT pg_catalog.pg_class.oid, pg_catalog.pg_class.relname
FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace
WHERE pg_catalog.pg_class.relkind = ANY (ARRAY[%(param_1)s::VARCHAR, %(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR]) AND pg_catalog.pg_namespace.nspname = %(nspname_1)s::VARCHAR AND pg_catalog.pg_class.relname IN (%(filter_names_1)s::VARCHAR)"""  # noqa: E501
SA_PK = (HERE / "sqlalchemy2_pk.sql").read_text()
KINDS = {"param_1": "r", "param_2": "p", "param_3": "f", "param_4": "v", "param_5": "m"}


def test_sqlalchemy_inspector_queries(db: LakeDatabase) -> None:
    session = db.session()
    names = run(session, *_sa(SA_TABLE_NAMES, {**KINDS, "relpersistence_1": "t",
                                                "nspname_1": "pg_catalog"}))  # fmt: skip
    assert names == [("orders",)]
    schemas = run(session, *_sa(SA_SCHEMAS, {"nspname_1": "pg/_"}))
    assert schemas == [("information_schema",), ("public",), ("sales",)]
    has = run(session, *_sa(SA_HAS_TABLE, {**KINDS, "nspname_1": "pg_catalog",
                                            "table_names_1": "orders"}))  # fmt: skip
    assert has == [("orders",)]
    columns = run(session, *_sa(SA_COLUMNS, {
        "attidentity_1": "", "json_build_object_2": "always", "attidentity_2": "a",
        "json_build_object_3": "start", "json_build_object_4": "increment",
        "json_build_object_5": "minvalue", "json_build_object_6": "maxvalue",
        "json_build_object_7": "cache", "json_build_object_8": "cycle", "attidentity_3": "",
        "attcollation_1": 0, "json_build_object_10": "name", "json_build_object_11": "schema",
        "attnum_1": 0, **KINDS, "nspname_1": "pg_catalog",
        "filter_names_1": "orders"}))  # fmt: skip
    assert [(c[0], c[1], c[3]) for c in columns] == [
        ("id", "integer", True),
        ("customer", "text", False),
        ("amount", "numeric(10,2)", False),
        ("created_at", "timestamp with time zone", False),
    ]
    oids = run(session, *_sa(SA_OIDS, {**KINDS, "nspname_1": "sales",
                                        "filter_names_1": "order_lines"}))  # fmt: skip
    assert [o[1] for o in oids] == ["order_lines"]
    pk = run(session, *_sa(SA_PK, {"generate_subscripts_1": 1,
                                    "param_1": "pg_catalog.pg_constraint", "contype": "p",
                                    "oids_1": oids[0][0]}))  # fmt: skip
    assert [(p[1], p[2]) for p in pk] == [(["order_id", "line_no"], "order_lines_pkey")]


def test_information_schema(db: LakeDatabase) -> None:
    session = db.session()
    rows = run(
        session,
        "SELECT table_schema, table_name, table_type FROM information_schema.tables ORDER BY 1, 2",
    )
    assert rows == [
        ("public", "orders", "BASE TABLE"),
        ("sales", "customers", "BASE TABLE"),
        ("sales", "order_lines", "BASE TABLE"),
    ]
    cols = run(
        session,
        "SELECT column_name, data_type, numeric_precision, numeric_scale, is_nullable "
        "FROM information_schema.columns WHERE table_name = 'orders' ORDER BY ordinal_position",
    )
    assert cols[2] == ("amount", "numeric", 10, 2, "YES")
    assert cols[0][4] == "NO"
