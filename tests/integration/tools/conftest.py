"""One schema twice: in a real Postgres 15 database and as Iceberg tables served by the query
server's LakeDatabase, for replaying tools' catalog SQL against both and comparing.

The schema is the one of tests/integration/server_db: public.orders (id int primary key,
customer text, amount numeric(10,2), created_at timestamptz), sales.order_lines (order_id,
line_no) primary key, qty bigint) and sales.customers (code text primary key, name text).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from streambed.server.database import DatabaseSettings, DbSession, LakeDatabase
from streambed.server.wire.server import QueryServer, ServerOptions
from tests.fixtures.postgres import ThrowawayPostgres
from tests.integration.server_db.conftest import FakeSnapshots, make_lake

POSTGRES_SCHEMA = """
CREATE SCHEMA sales;
CREATE TABLE public.orders (id integer PRIMARY KEY, customer text, amount numeric(10,2),
    created_at timestamptz);
CREATE TABLE sales.order_lines (order_id integer, line_no integer, qty bigint,
    PRIMARY KEY (order_id, line_no));
CREATE TABLE sales.customers (code text PRIMARY KEY, name text);
INSERT INTO public.orders VALUES (1, 'c1', 1.50, '2024-01-02 03:04:05.123456+00'),
    (2, 'c0', NULL, '2024-01-02 03:04:05.123456+00'),
    (3, NULL, 3.50, '2024-01-02 03:04:05.123456+00');
INSERT INTO sales.order_lines VALUES (1, 1, 11), (1, 2, 12), (2, 1, 21);
INSERT INTO sales.customers VALUES ('a', 'Alice'), ('b', NULL);
"""

# Postgres type oids by what a client reads from them.
_CATEGORIES = {
    "text": {18, 19, 25, 194, 1042, 1043},
    "int": {20, 21, 23, 24, 26, 28, 2205, 2206, 4089},
    "number": {700, 701, 1700},
    "bool": {16},
    "array": {22, 30, 1000, 1002, 1003, 1005, 1007, 1009, 1016, 1028, 1034, 1015},
    "timestamp": {1114, 1184},
}


def category(type_oid: int) -> str:
    for name, oids in _CATEGORIES.items():
        if type_oid in oids:
            return name
    return str(type_oid)


@dataclass
class Result:
    columns: list[tuple[str, str]]  # (name, category)
    rows: list[tuple[Any, ...]]

    @property
    def names(self) -> list[str]:
        return [c[0] for c in self.columns]

    def values(self, *names: str) -> list[tuple[Any, ...]]:
        """The rows' values of the named columns, in row order."""
        positions = [self.names.index(n) for n in names]
        return [tuple(row[p] for p in positions) for row in self.rows]


@dataclass
class Pair:
    """A Postgres connection and a query-server session over the same schema."""

    pg: psycopg.Connection[Any]
    lake: DbSession
    dbname: str
    port: int  # a real query server over the same lake (trust authentication)

    def connect(self) -> psycopg.Connection[Any]:
        """A psycopg connection to the query server, as a tool connects."""
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="tool", dbname=self.dbname,
            sslmode="disable", connect_timeout=10, autocommit=True,
        )  # fmt: skip

    def postgres(self, sql: str, params: list[Any] | None = None) -> Result:
        with self.pg.cursor() as cur:
            cur.execute(sql.encode(), params or None)
            if cur.description is None:
                return Result([], [])
            columns = [(d.name, category(d.type_code)) for d in cur.description]
            return Result(columns, list(cur.fetchall()))

    def served(self, sql: str, params: list[Any] | None = None) -> Result:
        result = self.lake.execute(sql, params)
        columns = [(c.name, category(c.type_oid)) for c in result.columns]
        return Result(columns, result.rows() if result.returns_rows else [])

    def both(
        self, sql: str, pg_params: list[Any] | None = None, params: list[Any] | None = None
    ) -> tuple[Result, Result]:
        """`sql` on Postgres (with `pg_params`) and on the query server (with `params`, or
        `pg_params` when None); their columns must have the same names and categories."""
        expected = self.postgres(sql, pg_params)
        got = self.served(sql, pg_params if params is None else params)
        assert got.columns == expected.columns, (got.columns, expected.columns)
        return expected, got

    def namespace_oids(self, name: str) -> tuple[int, int]:
        sql = "SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1"
        return self.postgres(sql, [name]).rows[0][0], self.served(sql, [name]).rows[0][0]

    def table_oids(self, schema: str, name: str) -> tuple[int, int]:
        sql = (
            "SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2"
        )
        found = self.postgres(sql, [schema, name]).rows, self.served(sql, [schema, name]).rows
        return found[0][0][0], found[1][0][0]


@pytest.fixture(scope="module")
def pair(pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    dbname = "tools_" + uuid.uuid4().hex[:8]
    pg_server.create_database(dbname)
    lake = make_lake(tmp_path_factory.mktemp("lake"))
    warehouse = lake.warehouse
    database = LakeDatabase(
        DatabaseSettings(warehouse=warehouse.as_uri()), FakeSnapshots(lake.watermark())
    )
    try:
        database.refresh()
        with pg_server.connect(dbname, cursor_factory=psycopg.RawCursor) as pg:
            pg.execute(POSTGRES_SCHEMA.encode())
            session = database.session(database=dbname)
            server = QueryServer(ServerOptions(host="127.0.0.1", port=0), database).start()
            try:
                yield Pair(pg, session, dbname, server.port)
            finally:
                server.stop()
                session.close()
    finally:
        database.close()
        pg_server.drop_database(dbname)
