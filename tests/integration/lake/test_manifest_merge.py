"""Merged manifests: merge-on-read flushes keep the snapshot's manifests bounded, and the
table (now and at older snapshots) reads back equal to a model with DuckDB and pyiceberg."""

from __future__ import annotations

import duckdb
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table, TableProperties

from streambed.lake.deletes import current_files
from tests.integration.lake.test_sink_deletes import (
    NAME,
    _delta,
    _duck_rows,
    _no_garbage,
    _pyiceberg_rows,
    _sink,
    catalog,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.integration

MERGE_AT = 4
FLUSHES = 14


def _at(duck: duckdb.DuckDBPyConnection, table: Table, snapshot_id: int) -> dict[int, str]:
    got = duck.execute(
        f"SELECT id, note FROM iceberg_scan('{table.metadata_location}', "
        f"snapshot_from_id := {snapshot_id})"
    ).fetchall()
    assert len(got) == len({r[0] for r in got}), "a key read twice"
    arrow = table.scan(snapshot_id=snapshot_id).to_arrow()
    pairs = zip(arrow.column("id").to_pylist(), arrow.column("note").to_pylist(), strict=True)
    assert {int(k): str(v) for k, v in pairs} == {int(k): str(v) for k, v in got}
    return {int(k): str(v) for k, v in got}


def _entries_keep_their_sequence_numbers(table: Table) -> None:
    """Every live entry carries the sequence number of the snapshot that added its file."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            added = table.snapshot_by_id(entry.snapshot_id)  # type: ignore[arg-type]
            assert added is not None
            assert entry.sequence_number == added.sequence_number
            assert entry.file_sequence_number == added.sequence_number


def test_merge_on_read_flushes_keep_manifests_bounded(
    catalog: Catalog,  # noqa: F811
    duck: duckdb.DuckDBPyConnection,
) -> None:
    sink = _sink(catalog)
    model = {i: "seed" for i in range(1000)}
    sink.apply(_delta(100, model))
    table = catalog.load_table(NAME)
    with table.transaction() as tx:
        tx.set_properties({TableProperties.MANIFEST_MIN_MERGE_COUNT: str(MERGE_AT)})
    then: dict[int, dict[int, str]] = {}
    merged: set[ManifestContent] = set()
    for n in range(1, FLUSHES + 1):
        # One key of the first file and one written by an earlier flush change each time,
        # and one is deleted: delete files name both old and new data files.
        rows = {n: f"a{n}", (n * 7) % 100: f"b{n}"}
        gone = [50 + n]
        sink.apply(_delta(100 + n * 100, rows, removed=[*rows, *gone]))
        model |= rows
        model.pop(50 + n, None)
        table = catalog.load_table(NAME)
        snapshot = table.current_snapshot()
        assert snapshot is not None
        manifests = snapshot.manifests(table.io)
        for content in (ManifestContent.DATA, ManifestContent.DELETES):
            assert len([m for m in manifests if m.content == content]) < MERGE_AT
        merged |= {m.content for m in manifests if m.existing_files_count}
        then[snapshot.snapshot_id] = dict(model)
        assert _duck_rows(duck, table) == model
    assert merged == {ManifestContent.DATA, ManifestContent.DELETES}
    assert current_files(table).deletes  # the first file's, at least
    _no_garbage(table)
    _entries_keep_their_sequence_numbers(table)
    assert _pyiceberg_rows(table) == model
    for snapshot_id, rows in then.items():
        assert _at(duck, table, snapshot_id) == rows
    # Entries removed by an older snapshot are not carried into merged manifests.
    snapshot = table.current_snapshot()
    assert snapshot is not None
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.status == ManifestEntryStatus.DELETED:
                assert entry.snapshot_id == snapshot.snapshot_id
