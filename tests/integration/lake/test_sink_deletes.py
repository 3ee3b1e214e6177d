"""Merge-on-read flushes: position-delete files against data files, read back exactly.

The sink writes delete files for files that lose few rows and rewrites the others (with
their pending deletes applied); DuckDB's `iceberg_scan` and pyiceberg read the table equal
to a model, delete files of removed data files leave the snapshot, and a replayed commit
lands once.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from streambed.buffer.changes import TableDelta, TableKey
from streambed.core.config import Settings
from streambed.lake import types as t
from streambed.lake.catalog import open_catalog
from streambed.lake.commit import commit
from streambed.lake.deletes import current_files, referenced
from streambed.lake.expire import Retention, expire
from streambed.lake.sink import IcebergSink, TableStats
from streambed.lake.sweep import referenced_files
from streambed.pgoutput.messages import Relation, RelationColumn
from streambed.spark.merger import SparkMerger
from streambed.storage.s3 import S3Access
from tests.fixtures.spark import PANDAS_WARNING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

RELATION = Relation(
    relation_id=16500,
    namespace="public",
    name="accounts",
    replica_identity="d",
    columns=(RelationColumn(1, "id", t.INT8, -1), RelationColumn(0, "note", t.TEXT, -1)),
)
KEY = TableKey(columns=(0,))
NAME = ("public", "accounts")


def _no_spark() -> Any:
    raise AssertionError("these merges run in process")


def _sink(catalog: Catalog, **kwargs: Any) -> IcebergSink:
    return IcebergSink(catalog, _no_spark, merge_local_bytes=1 << 30, **kwargs)


def _delta(
    lsn: int,
    rows: dict[int, str],
    removed: Sequence[int] = (),
    truncated: bool = False,
) -> TableDelta:
    encoded = tuple((str(k).encode(), v.encode()) for k, v in sorted(rows.items()))
    keys = tuple((str(k).encode(),) for k in removed)
    return TableDelta(RELATION, KEY, lsn, truncated, keys, encoded)


def _duck_rows(duck: duckdb.DuckDBPyConnection, table: Table) -> dict[int, str]:
    got = duck.execute(
        f"SELECT id, note FROM iceberg_scan('{table.metadata_location}') ORDER BY id"
    ).fetchall()
    assert len(got) == len({r[0] for r in got}), "a key read twice"
    return {int(k): str(v) for k, v in got}


def _pyiceberg_rows(table: Table) -> dict[int, str]:
    arrow = table.scan().to_arrow()
    pairs = list(zip(arrow.column("id").to_pylist(), arrow.column("note").to_pylist(), strict=True))
    assert len(pairs) == len({k for k, _ in pairs}), "a key read twice"
    return {int(k): str(v) for k, v in pairs}


def _no_garbage(table: Table) -> None:
    """Every live delete file names a live data file."""
    files = current_files(table)
    for d in files.deletes.values():
        assert referenced(d) in files.data


@pytest.fixture
def catalog(settings: Settings, duck: duckdb.DuckDBPyConnection) -> Catalog:
    if settings.on_s3:
        secret = S3Access.from_settings(settings).duckdb_secret("deletes_s3")
        duck.execute(secret.replace("CREATE SECRET", "CREATE OR REPLACE SECRET", 1))
    return open_catalog(settings)


def test_few_updates_write_a_delete_file_and_read_back(
    catalog: Catalog, duck: duckdb.DuckDBPyConnection
) -> None:
    sink = _sink(catalog)
    model = {i: f"v{i}" for i in range(1, 1001)}
    sink.apply(_delta(100, model))
    updates = {i: f"u{i}" for i in range(10, 1000, 100)}
    sink.apply(_delta(200, updates, removed=[*updates, 5]))
    model.update(updates)
    del model[5]
    table = catalog.load_table(NAME)
    files = current_files(table)
    assert len(files.deletes) == 1  # 11 of 1,000 rows: a delete file, no rewrite
    assert sum(d.record_count for d in files.deletes.values()) == 11
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None
    assert summary["streambed.lsn"] == "200"
    assert summary["added-position-deletes"] == "11"
    assert summary["total-position-deletes"] == "11"
    assert summary["total-delete-files"] == "1"
    assert TableStats.of(NAME, table).rows == len(model)  # the metrics' row count
    assert _duck_rows(duck, table) == model
    assert _pyiceberg_rows(table) == model
    # The same key updated again: its old row is hidden, its live row is in the new file.
    sink.apply(_delta(300, {10: "again"}, removed=[10]))
    model[10] = "again"
    table = catalog.load_table(NAME)
    assert _duck_rows(duck, table) == model
    at_300 = (table.metadata_location, table.metadata.current_snapshot_id, dict(model))
    # Copy-on-write rewrites the first file with its pending deletes applied; the delete
    # files of the rewritten file leave the snapshot.
    cow = _sink(catalog, write_mode="copy-on-write")
    cow.apply(_delta(400, {20: "cow"}, removed=[20, 110]))
    model[20] = "cow"
    del model[110]
    table = catalog.load_table(NAME)
    assert not current_files(table).deletes
    # Time travel to the snapshot before the rewrite applies that snapshot's delete files.
    location, snapshot_id, then = at_300
    got = duck.execute(
        f"SELECT id, note FROM iceberg_scan('{location}', snapshot_from_id := {snapshot_id})"
    ).fetchall()
    assert {int(k): str(v) for k, v in got} == then and len(got) == len(then)
    assert table.current_snapshot().summary["total-delete-files"] == "0"  # type: ignore[union-attr,index]
    assert _duck_rows(duck, table) == model
    assert _pyiceberg_rows(table) == model


def test_truncate_drops_delete_files(catalog: Catalog, duck: duckdb.DuckDBPyConnection) -> None:
    sink = _sink(catalog)
    sink.apply(_delta(100, {i: "a" for i in range(100)}))
    sink.apply(_delta(200, {}, removed=[3]))
    assert current_files(catalog.load_table(NAME)).deletes
    sink.apply(_delta(300, {7: "b"}, truncated=True))
    table = catalog.load_table(NAME)
    assert not current_files(table).deletes
    assert _duck_rows(duck, table) == {7: "b"}


def test_a_replayed_delete_only_commit_lands_once(catalog: Catalog) -> None:
    sink = _sink(catalog)
    sink.apply(_delta(100, {i: "a" for i in range(100)}))
    sink.apply(_delta(200, {}, removed=[3]))
    table = catalog.load_table(NAME)
    deletes = list(current_files(table).deletes.values())
    snapshots = len(table.metadata.snapshots)
    commit(table, removed=[], added=[], lsn=200, deletes=deletes)  # the same commit again
    assert len(catalog.load_table(NAME).metadata.snapshots) == snapshots


@st.composite
def _flushes(draw: st.DrawFn) -> list[tuple[str, float, list[tuple[str, int, int]]]]:
    """Flushes of (write mode, rewrite share, operations); an operation is insert/update/
    delete/move of a key in 0..59 (move: the key changes to the second number)."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        mode = draw(st.sampled_from(["merge-on-read", "merge-on-read", "copy-on-write"]))
        share = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
        ops = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["insert", "update", "delete", "move", "truncate"]),
                    st.integers(0, 59),
                    st.integers(0, 59),
                ),
                max_size=25,
            )
        )
        out.append((mode, share, ops))
    return out


def _collapse(
    model: dict[int, str], ops: list[tuple[str, int, int]], lsn: int
) -> tuple[dict[int, str], list[int], dict[int, str], bool]:
    """Apply `ops` to a copy of `model` as Postgres would (skipping impossible ones) and
    collapse them as the buffer does: (rows to add, keys to remove, new model, truncated)."""
    state = dict(model)
    touched: set[int] = set()
    truncated = False
    for i, (op, key, other) in enumerate(ops):
        value = f"{op}-{lsn}-{i}"
        if op == "truncate":
            state, touched, truncated = {}, set(), True
        elif (op == "insert" and key not in state) or (op == "update" and key in state):
            state[key] = value
            touched.add(key)
        elif op == "delete" and key in state:
            del state[key]
            touched.add(key)
        elif op == "move" and key in state and other not in state:
            del state[key]
            state[other] = value
            touched |= {key, other}
    rows = {k: state[k] for k in touched if k in state}
    return rows, sorted(touched), state, truncated


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


@hsettings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(flushes=_flushes())
def test_mixed_flushes_read_back_equal_to_a_model(
    flushes: list[tuple[str, float, list[tuple[str, int, int]]]],
    scratch: Path,
    duck: duckdb.DuckDBPyConnection,
) -> None:
    with tempfile.TemporaryDirectory(dir=scratch) as name:
        catalog = open_catalog(Settings(source_url="postgresql://unused", data_dir=Path(name)))
        model = {i: "seed" for i in range(0, 60, 2)}
        _sink(catalog).apply(_delta(100, model))
        for n, (mode, share, ops) in enumerate(flushes, start=1):
            lsn = 100 + n * 100
            rows, removed, model, truncated = _collapse(model, ops, lsn)
            sink = _sink(catalog, write_mode=mode, rewrite_share=share)
            sink.apply(_delta(lsn, rows, removed, truncated))
            table = catalog.load_table(NAME)
            assert _duck_rows(duck, table) == model
            _no_garbage(table)
        assert _pyiceberg_rows(catalog.load_table(NAME)) == model


def test_a_schema_rewrite_applies_pending_deletes(
    catalog: Catalog, duck: duckdb.DuckDBPyConnection
) -> None:
    sink = IcebergSink(catalog, _no_spark, merge_local_bytes=1 << 30, on_incompatible="rewrite")
    sink.apply(_delta(100, {i: str(i) for i in range(1, 101)}))
    sink.apply(_delta(200, {4: "40"}, removed=[3, 4]))  # a delete file hides 3 and old 4
    assert current_files(catalog.load_table(NAME)).deletes
    # `note` becomes an integer: Iceberg cannot follow, the table's files are rewritten.
    retyped = Relation(
        relation_id=RELATION.relation_id,
        namespace=RELATION.namespace,
        name=RELATION.name,
        replica_identity="d",
        columns=(RelationColumn(1, "id", t.INT8, -1), RelationColumn(0, "note", t.INT4, -1)),
    )
    rows = ((b"500", b"5"),)
    sink.apply(TableDelta(retyped, KEY, 300, False, (), rows))
    table = catalog.load_table(NAME)
    assert not current_files(table).deletes
    got = duck.execute(
        f"SELECT id, note FROM iceberg_scan('{table.metadata_location}') ORDER BY id"
    ).fetchall()
    expected = {i: i for i in range(1, 101) if i != 3} | {4: 40, 500: 5}
    assert dict(got) == expected
    assert len(got) == len(expected)


def test_expiry_and_sweep_keep_live_delete_files_and_remove_dead_ones(
    catalog: Catalog, settings: Settings, duck: duckdb.DuckDBPyConnection
) -> None:
    sink = _sink(catalog)
    sink.apply(_delta(100, {i: "a" for i in range(100)}))
    sink.apply(_delta(200, {}, removed=[3]))
    first = set(current_files(catalog.load_table(NAME)).deletes)
    sink.apply(_delta(300, {}, removed=[4]))
    sink.write_mode = "copy-on-write"
    sink.apply(_delta(400, {5: "b"}, removed=[5]))  # rewrites the file: both delete files go
    sink.write_mode = "merge-on-read"
    sink.apply(_delta(500, {}, removed=[6]))
    table = catalog.load_table(NAME)
    live = set(current_files(table).deletes)
    assert live and not live & first
    expire(table, Retention(hours=0, max_snapshots=1))
    table = catalog.load_table(NAME)
    referenced = referenced_files(table)
    assert live <= referenced
    assert not first & referenced  # only expired snapshots named them: unreferenced now
    model = {i: "a" for i in range(100) if i not in (3, 4, 6)} | {5: "b"}
    assert _duck_rows(duck, table) == model


@pytest.mark.filterwarnings(PANDAS_WARNING)
def test_a_spark_rewrite_applies_pending_deletes(
    spark: SparkSession, scratch: Path, duck: duckdb.DuckDBPyConnection
) -> None:
    with tempfile.TemporaryDirectory(dir=scratch) as name:
        catalog = open_catalog(Settings(source_url="postgresql://unused", data_dir=Path(name)))
        sink = IcebergSink(catalog, lambda: SparkMerger(spark), merge_local_bytes=0)
        model = {i: "a" for i in range(200)}
        sink.apply(_delta(100, model))
        sink.apply(_delta(200, {7: "b"}, removed=[7, 8]))  # delete file: old 7 and 8 hidden
        del model[8]
        model[7] = "b"
        sink.write_mode = "copy-on-write"  # now Spark rewrites both files
        sink.apply(_delta(300, {9: "c", 7: "d"}, removed=[9, 7]))
        model |= {9: "c", 7: "d"}
        table = catalog.load_table(NAME)
        assert not current_files(table).deletes
        assert _duck_rows(duck, table) == model
