"""Snapshots on a real lake (local warehouse and SeaweedFS): the manifest list of a table
stays bounded however many overwrites it takes, expiry keeps what `Retention` says, older
metadata stays readable, and the sweep then reclaims the files only expired snapshots held."""

from __future__ import annotations

import datetime as dt
import time

import duckdb
import pytest
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table

from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from streambed.lake.commit import commit, data_file, frontier
from streambed.lake.expire import Retention, expire
from streambed.lake.sweep import sweep
from streambed.lake.tables import ensure_table
from streambed.state.store import StateStore
from tests.integration.lake.test_lake_tables import KEY, RELATION, _duck_rows, _write
from tests.integration.lake.test_sweep import _exists, _ids, _path

pytestmark = pytest.mark.integration

UTC = dt.UTC


def _table(settings: Settings) -> Table:
    table = ensure_table(open_catalog(settings), RELATION, KEY)
    with StateStore(settings.state_path) as state:
        state.register("public", "orders", RELATION.relation_id, "ready")
    return table


def _manifests(table: Table) -> list[ManifestFile]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return snapshot.manifests(table.io)


def _overwrites(table: Table, count: int) -> list[tuple[int, list[str]]]:
    """`count` commits that each replace the rows 0..9 of the last one by new files, beside
    rows 100..104 committed once; (snapshot id, files) of each."""
    commit(table, removed=[], added=_write(table, range(100, 105)), lsn=1)
    out: list[tuple[int, list[str]]] = []
    previous: list[str] = []
    for i in range(count):
        files = _write(table, range(0, 10))
        commit(table, removed=previous, added=files, lsn=10 + i)
        snapshot = table.current_snapshot()
        assert snapshot is not None
        out.append((snapshot.snapshot_id, files))
        previous = files
    return out


def test_overwrites_keep_the_manifest_list_bounded(
    settings: Settings, duck: duckdb.DuckDBPyConnection
) -> None:
    table = _table(settings)
    history = _overwrites(table, 12)
    manifests = _manifests(table)
    # this commit's new files, its removed entries, and rows 100..104's: not one per commit
    assert len(manifests) == 3
    for manifest in manifests:
        live = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        assert live or manifest.added_snapshot_id == history[-1][0]
    assert _ids(table) == [*range(0, 10), *range(100, 105)]
    # each older snapshot still names its own manifests: time travel reads it
    old_id, old_files = history[3]
    assert _ids(table, old_id) == [*range(0, 10), *range(100, 105)]
    old = table.scan(snapshot_id=old_id).plan_files()
    assert {t.file.file_path for t in old} >= set(old_files)
    rows = _duck_rows(duck, settings, str(table.metadata_location))
    assert [r[0] for r in rows] == [*range(0, 10), *range(100, 105)]


def test_expiry_keeps_the_newest_and_the_sweep_reclaims_what_only_expired_ones_held(
    settings: Settings, duck: duckdb.DuckDBPyConnection
) -> None:
    table = _table(settings)
    history = _overwrites(table, 8)
    before = str(table.metadata_location)
    assert len(table.metadata.snapshots) == 9

    # young snapshots, but only the newest 4 may stay
    assert expire(table, Retention(hours=1, max_snapshots=4)) == 5
    kept = {s.snapshot_id for s in table.metadata.snapshots}
    assert kept == {snapshot_id for snapshot_id, _ in history[-4:]}
    assert frontier(table) == 17 and _ids(table) == [*range(0, 10), *range(100, 105)]
    # the catalog holds the expiry: a fresh load sees the same snapshots
    again = open_catalog(settings).load_table(("public", "orders"))
    assert {s.snapshot_id for s in again.metadata.snapshots} == kept
    # a reader still on the metadata from before the expiry is not cut off
    rows = _duck_rows(duck, settings, before)
    assert [r[0] for r in rows] == [*range(0, 10), *range(100, 105)]

    # two hours later every snapshot is past the window: only the current one stays
    later = dt.datetime.now(UTC) + dt.timedelta(hours=2)
    assert expire(table, Retention(hours=1, max_snapshots=4), now=later) == 3
    assert [s.snapshot_id for s in table.metadata.snapshots] == [history[-1][0]]
    assert expire(table, Retention(hours=1, max_snapshots=4), now=later) == 0

    # the files of expired snapshots are now unreferenced; the sweep takes them
    (result,) = sweep(settings, older_than=60, now=time.time() + 3600)
    replaced = [path for _, files in history[:-1] for path in files]
    assert result.refused is None
    assert sorted(result.removed) == sorted(_path(path) for path in replaced)
    assert not any(_exists(settings, path) for path in replaced)
    assert all(_exists(settings, path) for path in history[-1][1])
    assert _ids(table) == [*range(0, 10), *range(100, 105)]
    rows = _duck_rows(duck, settings, str(table.metadata_location))
    assert [r[0] for r in rows] == [*range(0, 10), *range(100, 105)]


def test_the_frontier_snapshot_survives_a_newer_one_without_it(settings: Settings) -> None:
    """A snapshot another tool committed (no streambed.lsn) on top: expiry keeps the newest
    snapshot with the frontier, so the frontier is still found."""
    table = _table(settings)
    _overwrites(table, 3)
    foreign = _write(table, range(200, 201))
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.append_data_file(data_file(table.io, tx.table_metadata, foreign[0]))
    later = dt.datetime.now(UTC) + dt.timedelta(hours=2)
    assert expire(table, Retention(hours=1, max_snapshots=1), now=later) == 3
    assert len(table.metadata.snapshots) == 2
    assert frontier(table) == 12
