"""`streambed sweep` on a real lake (local warehouse and SeaweedFS): files no snapshot
references are deleted once old enough; every file a snapshot references, young files and
a running copy's files stay; a table whose current files are missing is not touched."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from pyiceberg.table import Table

from streambed import cli
from streambed.core.config import Settings
from streambed.core.errors import StorageError
from streambed.lake.catalog import open_catalog
from streambed.lake.commit import commit
from streambed.lake.sweep import sweep
from streambed.lake.tables import ensure_table
from streambed.spark.data_source import filesystem, fs_options
from streambed.state.store import StateStore
from streambed.storage.uris import split_uri
from tests.fixtures.s3 import ThrowawayS3
from tests.integration.lake.test_lake_tables import KEY, RELATION, _write

pytestmark = pytest.mark.integration

HOUR = 3600.0


def _path(uri: str) -> str:
    return split_uri(uri)[1]


def _exists(settings: Settings, uri: str) -> bool:
    fs, path = filesystem(uri, fs_options(settings))
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def _ids(table: Table, snapshot_id: int | None = None) -> list[int]:
    rows = table.scan(snapshot_id=snapshot_id).to_arrow()
    return sorted(rows.column("id").to_pylist())


def _lake(settings: Settings) -> tuple[Table, list[str], list[str], list[str], int]:
    """public.orders with two snapshots (the second replaced the first's files), and one
    written file never committed: (table, first files, second files, orphans, first id)."""
    table = ensure_table(open_catalog(settings), RELATION, KEY)
    with StateStore(settings.state_path) as state:
        state.register("public", "orders", RELATION.relation_id, "ready")
    first = _write(table, range(0, 10))
    commit(table, removed=[], added=first, lsn=100)
    first_snapshot = table.current_snapshot()
    assert first_snapshot is not None
    second = _write(table, range(10, 20))
    commit(table, removed=first, added=second, lsn=200)
    orphans = _write(table, range(20, 30))  # a merge that died before its commit
    return table, first, second, orphans, first_snapshot.snapshot_id


def test_old_unreferenced_files_go_and_everything_a_reader_needs_stays(
    settings: Settings,
) -> None:
    table, first, second, orphans, first_id = _lake(settings)
    copy_dir = f"{table.location().rstrip('/')}/data/copy-run1"
    with StateStore(settings.state_path) as state:
        state.begin_copy("public", "orders", RELATION.relation_id, "run1", copy_dir, 300)
    fs, path = filesystem(f"{copy_dir}/run1-00000-a-0.parquet", fs_options(settings))
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(path.rsplit("/", 1)[0])
    with fs.open_output_stream(path) as out:
        out.write(b"a running copy's file")

    # Nothing is old enough yet.
    (result,) = sweep(settings)
    assert result.removed == [] and result.refused is None
    assert all(_exists(settings, f) for f in orphans)

    # An hour later, with files older than a minute: a dry run lists, deletes nothing.
    later = time.time() + HOUR
    (dry,) = sweep(settings, older_than=60, now=later, dry_run=True)
    assert sorted(dry.removed) == sorted(_path(f) for f in orphans)
    assert all(_exists(settings, f) for f in orphans)

    (result,) = sweep(settings, older_than=60, now=later)
    assert sorted(result.removed) == sorted(_path(f) for f in orphans)
    assert result.removed_bytes > 0 and result.refused is None
    assert not any(_exists(settings, f) for f in orphans)
    assert all(_exists(settings, f) for f in first + second)
    assert _exists(settings, f"{copy_dir}/run1-00000-a-0.parquet")
    table = open_catalog(settings).load_table(("public", "orders"))
    assert _ids(table) == list(range(10, 20))
    assert _ids(table, first_id) == list(range(0, 10))  # the older snapshot still reads

    # The copy finished (its directory is no longer protected): its stray file goes too.
    with StateStore(settings.state_path) as state:
        state.abandon_copy("public", "orders")
    (result,) = sweep(settings, older_than=60, now=later)
    assert [p.rsplit("/", 1)[1] for p in result.removed] == ["run1-00000-a-0.parquet"]


def test_a_table_missing_a_current_file_is_not_swept(settings: Settings) -> None:
    _, _, second, orphans, _ = _lake(settings)
    fs, path = filesystem(second[0], fs_options(settings))
    fs.delete_file(path)
    (result,) = sweep(settings, older_than=0, now=time.time() + HOUR)
    assert result.refused is not None and "current snapshot" in result.refused
    assert result.removed == []
    assert all(_exists(settings, f) for f in orphans)


def _env(settings: Settings) -> dict[str, str]:
    return {
        "STREAMBED_SOURCE_URL": settings.source_url,
        "STREAMBED_DATA_DIR": str(settings.data_dir),
        "STREAMBED_LOG_LEVEL": "warning",
    }


def test_the_command_keeps_young_files_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(source_url="postgresql://unused", data_dir=tmp_path)
    _, _, _, orphans, _ = _lake(settings)
    old, young = (
        orphans[0],
        _write(open_catalog(settings).load_table(("public", "orders")), range(40, 41))[0],
    )
    four_days_ago = time.time() - 96 * HOUR
    os.utime(_path(old), (four_days_ago, four_days_ago))
    for key, value in _env(settings).items():
        monkeypatch.setenv(key, value)

    assert cli.main(["sweep", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "public.orders: would remove 1 files" in printed and _path(old) in printed
    assert _exists(settings, old)

    assert cli.main(["sweep"]) == 0
    assert "public.orders: removed 1 files" in capsys.readouterr().out
    assert not _exists(settings, old) and _exists(settings, young)

    assert cli.main(["sweep", "--older-than", "0"]) == 0
    assert not _exists(settings, young)

    with pytest.raises(SystemExit) as exited:
        cli.main(["sweep", "--older-than", "-1"])
    assert exited.value.code == 2
    assert "0 hours or more" in capsys.readouterr().err


def test_the_command_exits_3_when_a_table_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(source_url="postgresql://unused", data_dir=tmp_path)
    _, _, second, _, _ = _lake(settings)
    os.remove(_path(second[0]))
    for key, value in _env(settings).items():
        monkeypatch.setenv(key, value)
    assert cli.main(["sweep", "--older-than", "0"]) == 3
    assert "public.orders: refused, nothing deleted" in capsys.readouterr().out


def test_nothing_to_sweep_in_a_new_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in _env(Settings(source_url="postgresql://unused", data_dir=tmp_path)).items():
        monkeypatch.setenv(key, value)
    assert cli.main(["sweep"]) == 0
    assert "nothing to sweep" in capsys.readouterr().out
    assert not (tmp_path / "state.db").exists()


def test_the_metadata_the_state_store_serves_keeps_its_files(settings: Settings) -> None:
    # A resync after a schema change drops the lake table and creates it again at the same
    # location; until the new copy commits, the query server reads the old metadata.
    table, first, second, _, _ = _lake(settings)
    old_location = table.metadata_location
    with StateStore(settings.state_path) as state:
        state.record_watermark(200, {"public.orders": old_location})
    catalog = open_catalog(settings)
    catalog.drop_table(("public", "orders"))
    again = ensure_table(catalog, RELATION, KEY)
    assert again.location() == table.location()
    later = time.time() + HOUR

    (result,) = sweep(settings, older_than=60, now=later)
    assert result.refused is None
    assert all(_exists(settings, f) for f in second)  # what the server reads of the old table
    assert not any(_exists(settings, f) for f in first)  # in a snapshot no one can read now
    assert _exists(settings, old_location) and result.removed_metadata == []

    with StateStore(settings.state_path) as state:  # the new copy committed
        state.record_watermark(300, {"public.orders": again.metadata_location})
    (result,) = sweep(settings, older_than=60, now=later)
    assert not any(_exists(settings, f) for f in second)
    # the old table's metadata, manifest lists and manifests: nothing reaches them now
    assert _path(old_location) in result.removed_metadata and not _exists(settings, old_location)
    assert all(_exists(settings, e.metadata_file) for e in again.metadata.metadata_log)
    assert _ids(open_catalog(settings).load_table(("public", "orders"))) == []


def test_served_metadata_that_cannot_be_read_refuses_the_sweep(settings: Settings) -> None:
    table, _, _, orphans, _ = _lake(settings)
    gone = table.metadata_location.replace(".metadata.json", "-gone.metadata.json")
    with StateStore(settings.state_path) as state:
        state.record_watermark(200, {"public.orders": gone})
    (result,) = sweep(settings, older_than=0, now=time.time() + HOUR)
    assert result.refused is not None and "cannot read" in result.refused
    assert all(_exists(settings, f) for f in orphans)


def test_storage_that_refuses_the_credentials_stops_the_sweep_with_a_clear_error(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    server: ThrowawayS3 = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    settings = Settings(
        source_url="postgresql://unused", data_dir=tmp_path, **server.settings_kwargs(bucket)
    )
    _, _, _, orphans, _ = _lake(settings)
    wrong = dataclasses.replace(settings, s3_secret_access_key="not-the-secret")
    with pytest.raises(StorageError, match="refused the credentials"):
        sweep(wrong, older_than=0, now=time.time() + HOUR)
    assert all(_exists(settings, f) for f in orphans)


def test_a_table_whose_metadata_is_gone_is_reported_and_left_alone(settings: Settings) -> None:
    table, _, _, orphans, _ = _lake(settings)
    fs, path = filesystem(table.metadata_location, fs_options(settings))
    fs.delete_file(path)
    (result,) = sweep(settings, older_than=0, now=time.time() + HOUR)
    assert result.refused is not None and "cannot load the table" in result.refused
    assert all(_exists(settings, f) for f in orphans)


def test_a_table_no_longer_streamed_is_still_swept_until_its_lake_table_is_dropped(
    settings: Settings,
) -> None:
    # A copy died, then the table left the publication before the restart: streambed
    # forgets it but keeps its lake table, whose stray files the sweep must still remove.
    _, first, second, orphans, first_id = _lake(settings)
    with StateStore(settings.state_path) as state:
        state.forget("public", "orders")
        assert state.tables() == [] and state.forgotten() == [("public", "orders")]
    later = time.time() + HOUR

    (dry,) = sweep(settings, older_than=60, now=later, dry_run=True)
    assert dry.table == "public.orders"
    assert sorted(dry.removed) == sorted(_path(f) for f in orphans)
    (result,) = sweep(settings, older_than=60, now=later)
    assert result.refused is None
    assert sorted(result.removed) == sorted(_path(f) for f in orphans)
    assert not any(_exists(settings, f) for f in orphans)
    assert all(_exists(settings, f) for f in first + second)
    table = open_catalog(settings).load_table(("public", "orders"))
    assert _ids(table) == list(range(10, 20)) and _ids(table, first_id) == list(range(0, 10))

    # Streamed again (registered): swept once, as a table of the state store.
    with StateStore(settings.state_path) as state:
        state.register("public", "orders", RELATION.relation_id, "pending")
        assert state.forgotten() == []
    assert [r.table for r in sweep(settings, older_than=60, now=later)] == ["public.orders"]

    # Forgotten again, and its lake table dropped by the operator: no longer listed.
    with StateStore(settings.state_path) as state:
        state.forget("public", "orders")
    open_catalog(settings).drop_table(("public", "orders"))
    assert sweep(settings, older_than=60, now=later, dry_run=True) == []
    with StateStore(settings.state_path) as state:
        assert state.forgotten() == [("public", "orders")]  # a dry run changes nothing
    assert sweep(settings, older_than=60, now=later) == []
    with StateStore(settings.state_path) as state:
        assert state.forgotten() == []
