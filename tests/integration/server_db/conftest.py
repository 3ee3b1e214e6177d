"""Real Iceberg tables (pyiceberg SqlCatalog + file warehouse) and a LakeDatabase over them."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    DecimalType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark

UTC = dt.UTC


@dataclass
class FakeSnapshots:
    """A SnapshotProvider whose watermark the test moves."""

    current: ServedWatermark | None = None
    calls: int = 0

    def latest(self) -> ServedWatermark | None:
        self.calls += 1
        return self.current


@dataclass
class Lake:
    catalog: SqlCatalog
    warehouse: Path
    tables: dict[str, Table] = field(default_factory=dict)
    lsn: int = 100

    def append(self, name: str, data: pa.Table, lsn: int) -> None:
        table = self.catalog.load_table(name)
        with table.transaction() as tx:
            tx.append(data, snapshot_properties={"streambed.lsn": _fmt(lsn)})
        self.tables[name] = self.catalog.load_table(name)
        self.lsn = lsn

    def watermark(self) -> ServedWatermark:
        return ServedWatermark(
            lsn=self.lsn,
            tables={
                tuple(name.split(".", 1)): t.metadata_location  # type: ignore[misc]
                for name, t in self.tables.items()
            },
        )


def _fmt(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


ORDERS = Schema(
    NestedField(1, "id", IntegerType(), required=True),
    NestedField(2, "customer", StringType()),
    NestedField(3, "amount", DecimalType(10, 2)),
    NestedField(4, "created_at", TimestamptzType()),
    identifier_field_ids=[1],
)
LINES = Schema(
    NestedField(1, "order_id", IntegerType(), required=True),
    NestedField(2, "line_no", IntegerType(), required=True),
    NestedField(3, "qty", LongType()),
    identifier_field_ids=[1, 2],
)
CUSTOMERS = Schema(
    NestedField(1, "code", StringType(), required=True),
    NestedField(2, "name", StringType()),
    identifier_field_ids=[1],
)


def orders_rows(ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int32()),
            "customer": [f"c{i % 2}" if i != 3 else None for i in ids],
            "amount": pa.array(
                [decimal.Decimal(f"{i}.50") if i != 2 else None for i in ids], pa.decimal128(10, 2)
            ),
            "created_at": pa.array(
                [dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC) for _ in ids],
                pa.timestamp("us", "UTC"),
            ),
        },
        schema=ORDERS.as_arrow(),
    )


def lines_rows(pairs: list[tuple[int, int]]) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array([p[0] for p in pairs], pa.int32()),
            "line_no": pa.array([p[1] for p in pairs], pa.int32()),
            "qty": pa.array([p[0] * 10 + p[1] for p in pairs], pa.int64()),
        },
        schema=LINES.as_arrow(),
    )


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return make_lake(tmp_path)


def make_lake(tmp_path: Path) -> Lake:
    """public.orders, sales.order_lines and sales.customers in a new warehouse under
    `tmp_path` (also for module-scoped fixtures)."""
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    catalog = SqlCatalog(
        "test", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=warehouse.as_uri()
    )
    catalog.create_namespace("public")
    catalog.create_namespace("sales")
    result = Lake(catalog, warehouse)
    for name, schema in (
        ("public.orders", ORDERS),
        ("sales.order_lines", LINES),
        ("sales.customers", CUSTOMERS),
    ):
        result.tables[name] = catalog.create_table(name, schema)
    result.append("public.orders", orders_rows([1, 2, 3]), lsn=0x100)
    result.append("sales.order_lines", lines_rows([(1, 1), (1, 2), (2, 1)]), lsn=0x100)
    customers = pa.table({"code": ["a", "b"], "name": ["Alice", None]}, schema=CUSTOMERS.as_arrow())
    result.append("sales.customers", customers, lsn=0x100)
    return result


@pytest.fixture
def snapshots(lake: Lake) -> FakeSnapshots:
    return FakeSnapshots(lake.watermark())


@pytest.fixture
def db(lake: Lake, snapshots: FakeSnapshots) -> Iterator[LakeDatabase]:
    database = LakeDatabase(DatabaseSettings(warehouse=lake.warehouse.as_uri()), snapshots)
    database.refresh()
    yield database
    database.close()
