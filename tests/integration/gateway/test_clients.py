"""pandas.read_sql through SQLAlchemy, and SQLAlchemy's inspector, against `streambed run`'s
query port over a real lake."""

from __future__ import annotations

import pandas as pd
import psycopg
import pytest
import sqlalchemy

from tests.integration.gateway.conftest import ORDERS, Gateway

pytestmark = pytest.mark.integration

SQL = (
    "SELECT id, customer_id, amount, weight, status, placed_at, shipped_at "
    "FROM shop.orders WHERE id <= 500 ORDER BY id"
)


def _engine(port: int) -> sqlalchemy.Engine:
    return sqlalchemy.create_engine(
        f"postgresql+psycopg://streambed@127.0.0.1:{port}/streambed?sslmode=disable"
    )


def test_pandas_read_sql_matches_the_source(loaded: Gateway) -> None:
    engine = _engine(loaded.run_port)
    try:
        lake = pd.read_sql(sqlalchemy.text(SQL), engine)
        with engine.connect() as conn:
            count = pd.read_sql("SELECT count(*) FROM shop.orders", conn)
    finally:
        engine.dispose()
    source = sqlalchemy.create_engine(
        loaded.source_url.replace("postgresql://", "postgresql+psycopg://", 1)
    )
    try:
        expected = pd.read_sql(sqlalchemy.text(SQL), source)
    finally:
        source.dispose()
    assert list(count.columns) == ["count"] and count.iloc[0, 0] == ORDERS
    assert len(lake) == 500
    assert str(lake["placed_at"].dtype).startswith("datetime64") and lake["placed_at"].dt.tz
    pd.testing.assert_frame_equal(lake, expected, check_dtype=True)


def test_sqlalchemy_inspector(loaded: Gateway) -> None:
    engine = _engine(loaded.run_port)
    try:
        inspector = sqlalchemy.inspect(engine)
        assert {"shop", "ledger", "public"} <= set(inspector.get_schema_names())
        assert inspector.get_table_names(schema="shop") == ["customers", "orders"]
        columns = {c["name"]: c for c in inspector.get_columns("orders", schema="shop")}
        assert list(columns) == [
            "id", "customer_id", "amount", "discount", "weight", "status", "placed_at",
            "shipped_at",
        ]  # fmt: skip
        assert isinstance(columns["id"]["type"], sqlalchemy.BigInteger)
        assert isinstance(columns["amount"]["type"], sqlalchemy.Numeric)
        assert (columns["amount"]["type"].precision, columns["amount"]["type"].scale) == (12, 2)
        assert isinstance(columns["placed_at"]["type"], sqlalchemy.DateTime)
        assert columns["placed_at"]["type"].timezone is True
        assert columns["id"]["nullable"] is False
        assert inspector.get_pk_constraint("orders", schema="shop")["constrained_columns"] == ["id"]
        table = sqlalchemy.Table(
            "customers", sqlalchemy.MetaData(), autoload_with=engine, schema="shop"
        )
        with engine.connect() as conn:
            rows = conn.execute(
                sqlalchemy.select(table.c.id, table.c.country)
                .where(table.c.id <= 3)
                .order_by(table.c.id)
            ).all()
        assert [r.id for r in rows] == [1, 2, 3]
    finally:
        engine.dispose()


def test_declared_types_and_not_null_reach_both_servers(loaded: Gateway) -> None:
    """The source's declared types and NOT NULL, recorded with the lake table by `streambed
    run`, as `streambed run`'s query port and a `streambed serve` in another process show
    them: as the source does."""
    sql = (
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'shop' AND c.relname = 'customers' AND a.attnum > 0 "
        "ORDER BY a.attnum"
    )
    with psycopg.connect(loaded.source_url) as source:
        expected = source.execute(sql).fetchall()
    assert ("country", "character varying(2)", False) in expected
    assert ("name", "text", True) in expected
    for port in (loaded.run_port, loaded.serve_port):
        with psycopg.connect(loaded.conninfo(port)) as lake:
            assert lake.execute(sql).fetchall() == expected
