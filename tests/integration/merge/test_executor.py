"""The mergers on a local directory: SparkMerger on real Spark through both I/O paths, and
ArrowMerger in this process, against the same expectations."""

from __future__ import annotations

import datetime
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from streambed.core.errors import Kind, StreambedError
from streambed.lake.merge import plan_merge
from streambed.lake.merge.arrow_merger import ArrowMerger
from streambed.lake.merge.contract import Merger
from streambed.spark.merger import IoMode, SparkMerger
from tests.fixtures.spark import PANDAS_WARNING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings(PANDAS_WARNING)]

UTC = datetime.UTC
FIELD_ID = b"PARQUET:field_id"


@dataclass(frozen=True)
class File:
    path: str
    record_count: int
    size_bytes: int
    key_bounds: tuple[tuple[Any, Any] | None, ...]


def field(name: str, type_: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable, {FIELD_ID: str(field_id).encode()})


def write_files(
    directory: Path, table: pa.Table, keys: Sequence[str], rows_per_file: int
) -> list[File]:
    """The table sorted by key, split into files, with per-column key bounds."""
    directory.mkdir(parents=True, exist_ok=True)
    if keys:
        table = table.sort_by([(k, "ascending") for k in keys])
    files = []
    for n, start in enumerate(range(0, table.num_rows, rows_per_file)):
        part = table.slice(start, rows_per_file)
        path = directory / f"old-{n}.parquet"
        pq.write_table(part, path)
        bounds = []
        for k in keys:
            column = part.column(k)
            lo, hi = pc.min(column).as_py(), pc.max(column).as_py()
            bounds.append(None if lo is None else (lo, hi))
        files.append(File(str(path), part.num_rows, os.path.getsize(path), tuple(bounds)))
    return files


def key_tuples(table: pa.Table, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in keys) for r in table.select(list(keys)).to_pylist()]


def read_all(paths: list[str]) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in paths]) if paths else pa.table({})


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(r.values()) for r in table.to_pylist()),
        key=lambda r: tuple((v is None, str(v)) for v in r),
    )


IO: list[IoMode] = ["spark", "pyarrow"]
IN_PROCESS = "in-process"


@pytest.fixture(params=[*IO, IN_PROCESS])
def merger(request: pytest.FixtureRequest) -> Merger:
    if request.param == IN_PROCESS:
        return ArrowMerger()  # no Spark session for it
    spark: SparkSession = request.getfixturevalue("spark")
    return SparkMerger(spark, io=request.param)


SCHEMA = pa.schema(
    [
        field("id", pa.int64(), 1, nullable=False),
        field("name", pa.string(), 2),
        field("n", pa.int32(), 3),
    ]
)


def simple_table(ids: range) -> pa.Table:
    return pa.table(
        {"id": list(ids), "name": [f"r{i}" for i in ids], "n": [i % 7 for i in ids]},
        schema=SCHEMA,
    )


def test_update_delete_insert(merger: Merger, tmp_path: Path) -> None:
    files = write_files(tmp_path / "data", simple_table(range(100)), ["id"], 25)
    removed = [(3,), (7,), (60,)]  # 3 updated, 7 and 60 deleted
    new = pa.table({"id": [3, 1000], "name": ["three", "new"], "n": [1, 2]}, schema=SCHEMA)
    plan = plan_merge(files, removed, truncated=False)
    assert [f.path for f in plan.rewrite] == [files[0].path, files[2].path]
    out = merger.execute(
        plan,
        rows=new,
        removed_keys=pa.table({"id": pa.array([3, 7, 60], pa.int64())}),
        unchanged={},
        key_columns=["id"],
        full_row=False,
        arrow_schema=SCHEMA,
        output_dir=str(tmp_path / "out"),
    )
    got = read_all(out)
    old = pa.concat_tables([pq.read_table(files[0].path), pq.read_table(files[2].path)])
    expected = [r for r in rows_of(old) if r[0] not in (3, 7, 60)] + rows_of(new)
    assert rows_of(got) == sorted(expected, key=lambda r: tuple((v is None, str(v)) for v in r))
    # Sorted by key, field ids on every column, the key required, nothing else left behind.
    assert got.column("id").to_pylist() == sorted(got.column("id").to_pylist())
    schema = pq.read_schema(out[0])
    assert [f.metadata[FIELD_ID] for f in schema] == [b"1", b"2", b"3"]
    assert not schema.field("id").nullable
    assert sorted(os.listdir(tmp_path / "out")) == sorted(os.path.basename(p) for p in out)


def test_composite_text_keys(merger: Merger, tmp_path: Path) -> None:
    schema = pa.schema(
        [
            field("tenant", pa.string(), 1, nullable=False),
            field("seq", pa.int32(), 2, nullable=False),
            field("body", pa.string(), 3),
        ]
    )
    table = pa.table(
        {
            "tenant": [t for t in ("acme", "bolt", "zeta") for _ in range(5)],
            "seq": [s for _ in range(3) for s in range(5)],
            "body": [f"b{i}" for i in range(15)],
        },
        schema=schema,
    )
    files = write_files(tmp_path / "data", table, ["tenant", "seq"], 5)
    removed = [("bolt", 2), ("zeta", 4)]
    plan = plan_merge(files, removed, truncated=False)
    assert len(plan.rewrite) == 2
    new = pa.table({"tenant": ["bolt"], "seq": [2], "body": ["changed"]}, schema=schema)
    out = merger.execute(
        plan,
        rows=new,
        removed_keys=pa.table({"tenant": ["bolt", "zeta"], "seq": pa.array([2, 4], pa.int32())}),
        unchanged={},
        key_columns=["tenant", "seq"],
        full_row=False,
        arrow_schema=schema,
        output_dir=str(tmp_path / "out"),
    )
    got = read_all(out)
    assert key_tuples(got, ["tenant", "seq"]) == [
        *[("bolt", s) for s in range(5)],
        *[("zeta", s) for s in range(4)],
    ]
    bodies = {(r["tenant"], r["seq"]): r["body"] for r in got.to_pylist()}
    assert bodies[("bolt", 2)] == "changed"


def test_full_row_identity_removes_one_row_per_occurrence(merger: Merger, tmp_path: Path) -> None:
    schema = pa.schema([field("a", pa.int64(), 1), field("b", pa.string(), 2)])
    table = pa.table(
        {"a": [1, 1, 1, 2, None, None, 3], "b": ["x", "x", "x", "y", None, None, None]},
        schema=schema,
    )
    files = write_files(tmp_path / "data", table, [], 100)
    removed = pa.table({"a": [1, 1, None, 3], "b": ["x", "x", None, None]}, schema=schema)
    plan = plan_merge(files, [tuple(r.values()) for r in removed.to_pylist()], truncated=False)
    assert len(plan.rewrite) == 1
    out = merger.execute(
        plan,
        rows=pa.table({"a": [9], "b": ["new"]}, schema=schema),
        removed_keys=removed,
        unchanged={},
        key_columns=[],
        full_row=True,
        arrow_schema=schema,
        output_dir=str(tmp_path / "out"),
    )
    assert rows_of(read_all(out)) == rows_of(
        pa.table({"a": [1, 2, None, 9], "b": ["x", "y", None, "new"]}, schema=schema)
    )


def test_unchanged_values_come_from_the_old_row(merger: Merger, tmp_path: Path) -> None:
    files = write_files(tmp_path / "data", simple_table(range(20)), ["id"], 10)
    new = pa.table(
        {"id": [4, 15, 30], "name": ["ignored", "fifteen", "new"], "n": [40, 0, 3]},
        schema=SCHEMA,
    )
    plan = plan_merge(files, [(4,), (15,)], truncated=False)
    out = merger.execute(
        plan,
        rows=new,
        removed_keys=pa.table({"id": pa.array([4, 15], pa.int64())}),
        unchanged={
            "name": pa.array([True, False, False]),
            "n": pa.array([False, True, False]),
        },
        key_columns=["id"],
        full_row=False,
        arrow_schema=SCHEMA,
        output_dir=str(tmp_path / "out"),
    )
    got = {r["id"]: (r["name"], r["n"]) for r in read_all(out).to_pylist()}
    assert len(got) == 21
    assert got[4] == ("r4", 40)  # name kept from the lake, n from the update
    assert got[15] == ("fifteen", 15 % 7)
    assert got[30] == ("new", 3)


def test_unchanged_value_without_old_row_fails(merger: Merger, tmp_path: Path) -> None:
    files = write_files(tmp_path / "data", simple_table(range(20)), ["id"], 10)
    plan = plan_merge(files, [(4,)], truncated=False)
    with pytest.raises(StreambedError) as info:
        merger.execute(
            plan,
            rows=pa.table({"id": [5], "name": [None], "n": [1]}, schema=SCHEMA),
            removed_keys=pa.table({"id": pa.array([4], pa.int64())}),
            unchanged={"name": pa.array([True])},
            key_columns=["id"],
            full_row=False,
            arrow_schema=SCHEMA,
            output_dir=str(tmp_path / "out"),
        )
    assert info.value.kind is Kind.STATE
    assert not list((tmp_path / "out").glob("*.parquet"))


def test_truncate_writes_only_new_rows(merger: Merger, tmp_path: Path) -> None:
    files = write_files(tmp_path / "data", simple_table(range(20)), ["id"], 10)
    plan = plan_merge(files, [(4,)], truncated=True)
    assert len(plan.drop) == 2 and not plan.rewrite
    new = simple_table(range(500, 503))
    args: dict[str, Any] = {
        "removed_keys": pa.table({"id": pa.array([], pa.int64())}),
        "unchanged": {},
        "key_columns": ["id"],
        "full_row": False,
        "arrow_schema": SCHEMA,
    }
    out = merger.execute(plan, rows=new, output_dir=str(tmp_path / "out"), **args)
    assert rows_of(read_all(out)) == rows_of(new)
    empty = merger.execute(plan, rows=new.slice(0, 0), output_dir=str(tmp_path / "o2"), **args)
    assert empty == []


def test_deleting_every_row_writes_no_file(merger: Merger, tmp_path: Path) -> None:
    files = write_files(tmp_path / "data", simple_table(range(3)), ["id"], 10)
    plan = plan_merge(files, [(0,), (1,), (2,)], truncated=False)
    out = merger.execute(
        plan,
        rows=simple_table(range(0)),
        removed_keys=pa.table({"id": pa.array([0, 1, 2], pa.int64())}),
        unchanged={},
        key_columns=["id"],
        full_row=False,
        arrow_schema=SCHEMA,
        output_dir=str(tmp_path / "out"),
    )
    assert out == []


def test_types_are_preserved_exactly(merger: Merger, tmp_path: Path) -> None:
    schema = pa.schema(
        [
            field("id", pa.decimal128(38, 10), 1, nullable=False),
            field("at", pa.timestamp("us", tz="UTC"), 2),
            field("local", pa.timestamp("us"), 3),
            field("day", pa.date32(), 4),
            field("amount", pa.decimal128(12, 2), 5),
            field("raw", pa.binary(), 6),
            field("ok", pa.bool_(), 7),
            field("f", pa.float64(), 8),
        ]
    )
    base = datetime.datetime(2024, 2, 29, 23, 59, 59, 999999)
    ids = [Decimal("12345678901234567890.0123456789") + i for i in range(6)]
    table = pa.table(
        {
            "id": ids,
            "at": [base.replace(tzinfo=UTC) - datetime.timedelta(microseconds=i) for i in range(6)],
            "local": [base + datetime.timedelta(days=i) for i in range(6)],
            "day": [datetime.date(1, 1, 1), datetime.date(9999, 12, 31), None, None, None, None],
            "amount": [Decimal("-9999999999.99"), Decimal("0.01"), None, None, None, None],
            "raw": [b"\x00\xff", b"", None, None, None, None],
            "ok": [True, False, None, None, None, None],
            "f": [1.5e300, -0.0, float("inf"), None, None, None],
        },
        schema=schema,
    )
    files = write_files(tmp_path / "data", table, ["id"], 3)
    plan = plan_merge(files, [(ids[4],)], truncated=False)
    assert len(plan.rewrite) == 1
    out = merger.execute(
        plan,
        rows=table.slice(0, 0),
        removed_keys=pa.table({"id": pa.array([ids[4]], pa.decimal128(38, 10))}),
        unchanged={},
        key_columns=["id"],
        full_row=False,
        arrow_schema=schema,
        output_dir=str(tmp_path / "out"),
    )
    got = read_all(out)
    assert got.schema == schema.with_metadata(got.schema.metadata)
    expected = pa.concat_tables([table.slice(3, 1), table.slice(5, 1)])
    assert got.to_pylist() == expected.to_pylist()


def test_columns_are_matched_by_field_id(merger: Merger, tmp_path: Path) -> None:
    """A renamed column is found by its id; a column added later reads as NULL."""
    old_schema = pa.schema([field("id", pa.int64(), 1, False), field("old_name", pa.string(), 2)])
    files = write_files(
        tmp_path / "data",
        pa.table({"id": [1, 2], "old_name": ["a", "b"]}, schema=old_schema),
        ["id"],
        10,
    )
    schema = pa.schema(
        [
            field("id", pa.int64(), 1, False),
            field("label", pa.string(), 2),
            field("x", pa.int32(), 3),
        ]
    )
    out = merger.execute(
        plan_merge(files, [(2,)], truncated=False),
        rows=pa.table({"id": [3], "label": ["c"], "x": [7]}, schema=schema),
        removed_keys=pa.table({"id": pa.array([2], pa.int64())}),
        unchanged={},
        key_columns=["id"],
        full_row=False,
        arrow_schema=schema,
        output_dir=str(tmp_path / "out"),
    )
    assert read_all(out).to_pylist() == [
        {"id": 1, "label": "a", "x": None},
        {"id": 3, "label": "c", "x": 7},
    ]


def test_large_output_is_split_into_disjoint_sorted_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    limits: dict[str, Any] = {"target_file_bytes": 100_000, "max_rows_per_file": 8_000}
    mergers: list[tuple[str, Merger]] = [(io, SparkMerger(spark, io=io, **limits)) for io in IO]
    for io, merger in [*mergers, (IN_PROCESS, ArrowMerger(**limits))]:
        files = write_files(tmp_path / io / "data", simple_table(range(50_000)), ["id"], 50_000)
        out = merger.execute(
            plan_merge(files, [(10,)], truncated=False),
            rows=simple_table(range(60_000, 60_010)),
            removed_keys=pa.table({"id": pa.array([10], pa.int64())}),
            unchanged={},
            key_columns=["id"],
            full_row=False,
            arrow_schema=SCHEMA,
            output_dir=str(tmp_path / io / "out"),
        )
        assert len(out) > 1
        ranges = []
        for p in out:
            ids = pq.read_table(p).column("id").to_pylist()
            assert ids == sorted(ids)
            assert len(ids) <= 8_000
            ranges.append((ids[0], ids[-1]))
        ranges.sort()
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))
        assert sum(pq.read_metadata(p).num_rows for p in out) == 50_009
