"""A real source Postgres with a schema that has foreign keys, NOT NULL columns, jsonb,
int[], uuid, varchar(20), char(4), timestamp(3) and numeric(8,2); its replicated tables
copied into a lake the way `streambed run`'s initial copy creates them (the source catalog
read by `copy.catalog.table_info`, the lake table made by `copy.job.lake_table`, which
records the source's facts); and a query server over that lake. Each client test asks the
source Postgres and the query server the same things and compares."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from streambed.copy.catalog import table_info
from streambed.copy.job import lake_table
from streambed.lake.convert import rows_to_arrow
from streambed.lake.tables import arrow_schema
from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark
from streambed.server.wire.server import QueryServer, ServerOptions
from tests.fixtures.postgres import ThrowawayPostgres

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE public.customers (
    id int PRIMARY KEY,
    email varchar(20) NOT NULL,
    code char(4),
    tags int[],
    profile jsonb,
    token uuid NOT NULL,
    born timestamp(3),
    score numeric(8,2)
);
CREATE TABLE public.outside (id int PRIMARY KEY);
CREATE TABLE public.orders (
    id bigint PRIMARY KEY,
    customer_id int NOT NULL REFERENCES public.customers (id) ON DELETE CASCADE,
    outside_id int REFERENCES public.outside (id),
    note text,
    at timestamptz,
    "by" text
);
INSERT INTO public.customers VALUES
    (1, 'a@example.com', 'AB', '{1,2,3}', '{"k": [1, 2]}',
     'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-01-02 03:04:05.678', 12.50),
    (2, 'b@example.com', NULL, '{}', NULL,
     'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', NULL, NULL);
INSERT INTO public.outside VALUES (7);
INSERT INTO public.orders VALUES
    (10, 1, 7, 'first', '2024-05-06 07:08:09+00', 'web'),
    (11, 2, NULL, NULL, NULL, NULL);
"""
REPLICATED = ("customers", "orders")  # public.outside is not replicated


@dataclasses.dataclass(frozen=True)
class Setup:
    source_url: str
    source_port: int
    source_database: str
    source_user: str
    source_password: str
    port: int  # the query server's


@dataclasses.dataclass
class _Snapshots:
    watermark: ServedWatermark

    def latest(self) -> ServedWatermark | None:
        return self.watermark


def _copy(url: str, catalog: SqlCatalog) -> dict[tuple[str, str], str]:
    """Each replicated table into the lake, with the source facts the copy records."""
    locations = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name in REPLICATED:
            info = table_info(conn, "public", name)
            table = lake_table(catalog, info)
            # the values in Postgres text format, as pgoutput and the copy read them
            result = conn.pgconn.exec_(f"SELECT * FROM public.{name}".encode())
            rows = [
                tuple(
                    None if v is None else bytes(v)
                    for v in (result.get_value(r, c) for c in range(result.nfields))
                )
                for r in range(result.ntuples)
            ]
            table.append(rows_to_arrow(info.relation, rows, arrow_schema(table)).table)
            locations[("public", name)] = catalog.load_table(("public", name)).metadata_location
    return locations


@pytest.fixture(scope="package")
def setup(
    pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    database = pg_server.create_database("sb_clients")
    url = pg_server.url(database)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    root: Path = tmp_path_factory.mktemp("clients-lake")
    warehouse = root / "warehouse"
    warehouse.mkdir()
    catalog = SqlCatalog(
        "lake", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=warehouse.as_uri()
    )
    locations = _copy(url, catalog)
    db = LakeDatabase(
        DatabaseSettings(warehouse=warehouse.as_uri(), database_name=database),
        _Snapshots(ServedWatermark(lsn=1, tables=locations)),
    )
    server = None
    try:
        db.refresh()
        server = QueryServer(ServerOptions(port=0), db).start()
        yield Setup(url, pg_server.port, database, "postgres", pg_server.password, server.port)
    finally:
        if server is not None:
            server.stop()
        db.close()
        catalog.engine.dispose()
        if not pg_server.removed:
            pg_server.drop_database(database)
