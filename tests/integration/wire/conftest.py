"""Real Iceberg tables (pyiceberg SqlCatalog + file warehouse), the real LakeDatabase over
them, and real query servers on free ports."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark
from streambed.server.wire.server import QueryServer, ServerOptions

USER, PASSWORD = "alice", "s3cret-pw"
ITEM_ROWS = 2000

ITEMS = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "price", DecimalType(10, 2)),
    NestedField(4, "qty", IntegerType()),
    NestedField(5, "ratio", DoubleType()),
    NestedField(6, "active", BooleanType()),
    NestedField(7, "day", DateType()),
    NestedField(8, "seen", TimestampType()),
    NestedField(9, "created_at", TimestamptzType()),
    NestedField(10, "payload", BinaryType()),
    identifier_field_ids=[1],
)


def item_rows(n: int) -> pa.Table:
    base = dt.datetime(2024, 1, 1, 12, 0, 0)
    ids = list(range(1, n + 1))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"item {i}" if i % 7 else None for i in ids],
            "price": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(10, 2)),
            "qty": pa.array([i % 50 for i in ids], pa.int32()),
            "ratio": [i / 8 for i in ids],
            "active": [i % 2 == 0 for i in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 366) for i in ids],
            "seen": [base + dt.timedelta(minutes=i) for i in ids],
            "created_at": pa.array(
                [(base + dt.timedelta(hours=i)).replace(tzinfo=dt.UTC) for i in ids],
                pa.timestamp("us", "UTC"),
            ),
            "payload": [bytes([i % 256, 0, 255]) for i in ids],
        },
        schema=ITEMS.as_arrow(),
    )


@dataclasses.dataclass
class StaticSnapshots:
    watermark: ServedWatermark

    def latest(self) -> ServedWatermark | None:
        return self.watermark


@pytest.fixture(scope="session")
def lake_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakeDatabase]:
    root = tmp_path_factory.mktemp("wire-lake")
    warehouse = root / "warehouse"
    warehouse.mkdir()
    catalog = SqlCatalog(
        "wire", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=warehouse.as_uri()
    )
    catalog.create_namespace("public")
    table = catalog.create_table("public.items", ITEMS)
    table.append(item_rows(ITEM_ROWS))
    table = catalog.load_table("public.items")
    snapshots = StaticSnapshots(
        ServedWatermark(lsn=1, tables={("public", "items"): table.metadata_location})
    )
    db = LakeDatabase(DatabaseSettings(warehouse=warehouse.as_uri()), snapshots)
    db.refresh()
    yield db
    db.close()
    catalog.engine.dispose()


def start_server(database: LakeDatabase, **options: object) -> QueryServer:
    return QueryServer(ServerOptions(port=0, **options), database).start()  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def server(lake_database: LakeDatabase) -> Iterator[QueryServer]:
    """The main server: SCRAM users, plaintext, no statement timeout."""
    srv = start_server(lake_database, users=f"{USER}:{PASSWORD},bob:other")
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def trust_server(lake_database: LakeDatabase) -> Iterator[QueryServer]:
    """No users configured (trust): for connection-rate tests, where SCRAM's key stretching
    would dominate."""
    srv = start_server(lake_database, max_connections=200)
    yield srv
    srv.stop()


def conninfo(server: QueryServer, user: str = USER, password: str = PASSWORD, **extra: str) -> str:
    parts = {
        "host": "127.0.0.1",
        "port": str(server.port),
        "user": user,
        "password": password,
        "dbname": "streambed",
        "sslmode": "disable",
        "connect_timeout": "10",
        **extra,
    }
    return " ".join(f"{k}='{v}'" for k, v in parts.items())


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost, made with the openssl CLI."""
    root = tmp_path_factory.mktemp("tls")
    cert, key = root / "server.crt", root / "server.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
