"""Metadata files on a real lake (local warehouse and SeaweedFS): a lake table keeps only
its last metadata files as it commits, and the sweep removes the manifest lists and
manifests only expired snapshots reached, keeping everything a kept snapshot needs."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow.fs as pafs
import pytest
from pyiceberg.table import Table

from streambed.core.config import Settings
from streambed.lake import sweep as sweep_module
from streambed.lake.catalog import open_catalog
from streambed.lake.commit import commit
from streambed.lake.expire import Retention, expire
from streambed.lake.sweep import sweep
from streambed.lake.tables import METADATA_PROPERTIES, ensure_table
from streambed.spark.data_source import filesystem, fs_options
from tests.integration.lake.test_expire import _overwrites, _table
from tests.integration.lake.test_lake_tables import KEY, RELATION, _duck_rows, _write
from tests.integration.lake.test_sweep import _exists, _ids, _path

pytestmark = pytest.mark.integration

VERSIONS = "write.metadata.previous-versions-max"


def _listing(settings: Settings, table: Table) -> list[str]:
    fs, base = filesystem(f"{table.location().rstrip('/')}/metadata", fs_options(settings))
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def _plant(settings: Settings, table: Table, name: str) -> str:
    uri = f"{table.location().rstrip('/')}/metadata/{name}"
    fs, path = filesystem(uri, fs_options(settings))
    with fs.open_output_stream(path) as out:
        out.write(b"kept by another tool")
    return uri


def test_a_lake_table_keeps_only_its_last_metadata_files(
    settings: Settings, duck: duckdb.DuckDBPyConnection
) -> None:
    table = _table(settings)
    for key, value in METADATA_PROPERTIES.items():
        assert table.properties[key] == value
    with table.transaction() as tx:  # an operator's own limit is kept
        tx.set_properties({VERSIONS: "4"})
    table = ensure_table(open_catalog(settings), RELATION, KEY)
    assert table.properties[VERSIONS] == "4"

    _overwrites(table, 10)
    names = [p for p in _listing(settings, table) if p.endswith(".metadata.json")]
    assert len(names) == 5  # the current one and the 4 before it, of 14 written
    assert sorted(names) == sorted(
        _path(p)
        for p in [*(e.metadata_file for e in table.metadata.metadata_log), table.metadata_location]
    )
    again = open_catalog(settings).load_table(("public", "orders"))
    assert _ids(again) == [*range(0, 10), *range(100, 105)]
    rows = _duck_rows(duck, settings, str(again.metadata_location))
    assert [r[0] for r in rows] == [*range(0, 10), *range(100, 105)]


def test_a_table_made_without_the_properties_gets_them(settings: Settings) -> None:
    table = _table(settings)
    with table.transaction() as tx:  # as a table created by an older streambed
        tx.remove_properties(*METADATA_PROPERTIES)
    assert not set(METADATA_PROPERTIES) & set(table.refresh().properties)
    table = ensure_table(open_catalog(settings), RELATION, KEY)
    for key, value in METADATA_PROPERTIES.items():
        assert table.properties[key] == value
    fresh = open_catalog(settings).load_table(("public", "orders"))
    assert {k: fresh.properties[k] for k in METADATA_PROPERTIES} == METADATA_PROPERTIES


def test_the_sweep_removes_the_metadata_only_expired_snapshots_reached(
    settings: Settings, duck: duckdb.DuckDBPyConnection
) -> None:
    table = _table(settings)
    _overwrites(table, 8)
    lists = {s.snapshot_id: s.manifest_list for s in table.metadata.snapshots}
    manifests = {
        s.snapshot_id: {m.manifest_path for m in s.manifests(table.io)}
        for s in table.metadata.snapshots
    }
    others = [_plant(settings, table, n) for n in ("version-hint.text", "notes.json")]

    assert expire(table, Retention(hours=1, max_snapshots=3)) == 6
    kept = {s.snapshot_id for s in table.metadata.snapshots}
    expired = set(lists) - kept
    needed = set().union(*(manifests[i] for i in kept))
    gone = {lists[i] for i in expired} | set().union(*(manifests[i] for i in expired)) - needed
    assert gone and all(_exists(settings, p) for p in gone)

    (young,) = sweep(settings)  # nothing is old enough yet
    assert young.removed_metadata == [] and young.refused is None

    (result,) = sweep(settings, older_than=60, now=time.time() + 3600)
    assert result.refused is None
    assert sorted(result.removed_metadata) == sorted(_path(p) for p in gone)
    assert not any(_exists(settings, p) for p in gone)
    assert all(_exists(settings, p) for p in others)
    assert all(_exists(settings, e.metadata_file) for e in table.metadata.metadata_log)

    # every kept snapshot still reads, from a fresh load; DuckDB reads the current one
    fresh = open_catalog(settings).load_table(("public", "orders"))
    for snapshot_id in kept:
        assert _ids(fresh, snapshot_id) == [*range(0, 10), *range(100, 105)]
    rows = _duck_rows(duck, settings, str(fresh.metadata_location))
    assert [r[0] for r in rows] == [*range(0, 10), *range(100, 105)]

    (again,) = sweep(settings, older_than=60, now=time.time() + 3600)
    assert again.removed_metadata == [] and again.removed == []


def test_metadata_older_than_the_log_goes_but_not_what_the_log_names(settings: Settings) -> None:
    # A table that committed before it kept only its last metadata files
    table = _table(settings)
    with table.transaction() as tx:
        tx.remove_properties(*METADATA_PROPERTIES)
    _overwrites(table, 4)
    early = [e.metadata_file for e in table.metadata.metadata_log]
    with table.transaction() as tx:
        tx.set_properties({"write.metadata.previous-versions-max": "3"})
    named = [e.metadata_file for e in table.metadata.metadata_log]
    assert len(named) == 3 and all(_exists(settings, p) for p in early)

    later = dt.datetime.now(dt.UTC).timestamp() + 3600
    (result,) = sweep(settings, older_than=60, now=later)
    dropped = [p for p in early if p not in named]
    assert dropped and sorted(_path(p) for p in dropped) == sorted(
        p for p in result.removed_metadata if p.endswith(".metadata.json")
    )
    assert all(_exists(settings, p) for p in [*named, str(table.metadata_location)])
    assert _ids(open_catalog(settings).load_table(("public", "orders"))) == [
        *range(0, 10),
        *range(100, 105),
    ]


def test_a_commit_during_the_listings_neither_refuses_nor_loses_files(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A busy table commits while the sweep lists it: its new metadata file and data files
    # are not in the listings. That is no reason to refuse, and none of them may go.
    table = _table(settings)
    history = _overwrites(table, 3)
    real = sweep_module.list_files
    made: list[list[str]] = []

    def list_then_commit(directory: str, options: Mapping[str, str]) -> Any:
        listed = real(directory, options)
        if directory.endswith("/metadata") and not made:
            other = open_catalog(settings).load_table(("public", "orders"))
            made.append(_write(other, range(0, 10)))
            commit(other, removed=history[-1][1], added=made[0], lsn=100)
        return listed

    monkeypatch.setattr(sweep_module, "list_files", list_then_commit)
    (result,) = sweep(settings, older_than=60, now=time.time() + 3600)
    assert made and result.refused is None
    fresh = open_catalog(settings).load_table(("public", "orders"))
    assert all(_exists(settings, p) for p in made[0])
    assert _exists(settings, str(fresh.metadata_location))
    assert _ids(fresh) == [*range(0, 10), *range(100, 105)]
    # what the commit replaced is unreferenced only by the newest metadata; kept or gone,
    # every snapshot the table still has reads
    for snapshot in fresh.metadata.snapshots:
        assert len(_ids(fresh, snapshot.snapshot_id)) in (5, 15)
