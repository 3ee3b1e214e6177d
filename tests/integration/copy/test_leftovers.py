"""After a copy commits, its run directory holds exactly the files the commit references: a
file a failed task attempt left there (planted by the `copy_leftover_file` failpoint, a
copy of a written file under another attempt's name) is removed, on the local warehouse
and on S3; and at the restart after a crash between the commit and the cleanup. A running
streambed's sweep removes old unreferenced files, in a table it no longer streams too."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import psycopg
import pyarrow.fs as pafs
import pytest

from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from streambed.lake.files import current_data_files
from streambed.spark.data_source import filesystem, fs_options
from tests.fixtures.postgres import PgDatabase
from tests.fixtures.s3 import ThrowawayS3
from tests.integration.copy.test_initial_copy import ROWS, TABLES, _all_ready, _schema
from tests.integration.pipeline.conftest import Deployment, deployment
from tests.integration.pipeline.harness import wait_lake_equals_source, wait_until
from tests.integration.pipeline.test_slot_lost import _cli

pytestmark = pytest.mark.integration


def _files_under_data(settings: Settings, table: str) -> list[str]:
    """Every file in the lake table's data directory, as URIs."""
    schema, name = table.split(".")
    location = open_catalog(settings).load_table((schema, name)).location().rstrip("/")
    fs, base = filesystem(f"{location}/data", fs_options(settings))
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return [
        f"{location}/data/{i.path[len(base) :].lstrip('/')}"
        for i in infos
        if i.type == pafs.FileType.File
    ]


def _live_files(settings: Settings, table: str) -> set[str]:
    schema, name = table.split(".")
    return set(current_data_files(open_catalog(settings).load_table((schema, name))))


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_a_file_left_by_a_failed_task_attempt_is_removed_after_the_commit(
    storage: str, pg_db: PgDatabase, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if storage == "s3":
        server: ThrowawayS3 = request.getfixturevalue("s3_server")
        d = deployment(pg_db, tmp_path, server, request.getfixturevalue("s3_bucket"))
    else:
        d = deployment(pg_db, tmp_path)
    d.env["STREAMBED_FLUSH_INTERVAL"] = "1"
    d.proc.env.update(d.env)
    try:
        _schema(d.url)
        d.proc.start({"STREAMBED_FAILPOINTS": "copy_leftover_file"})
        wait_until(lambda: _all_ready(d, TABLES), 240, "every table copied", d.proc)
        logs = d.proc.logs()
        assert "failpoint copy_leftover_file: planted" in logs
        assert "copy leftovers removed" in logs
        for table in TABLES:
            files = _files_under_data(d.settings, table)
            assert files, table
            assert not [f for f in files if "leftover" in f], files
            # Nothing but what the commit references, all in one run's directory.
            assert set(files) == _live_files(d.settings, table), table
            assert len({f.rsplit("/", 1)[0] for f in files}) == 1, files
        with psycopg.connect(d.url, autocommit=True) as conn:
            conn.execute(f"UPDATE {TABLES[0]} SET name = 'after' WHERE id <= 10")
            conn.execute(f"DELETE FROM {TABLES[1]} WHERE id > {ROWS - 10}")
        wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=180)
        assert d.proc.stop() == 0
    finally:
        d.proc.kill()


def test_a_copy_killed_after_its_commit_has_its_leftovers_removed_at_restart(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    with psycopg.connect(d.url, autocommit=True) as conn:  # one table: one copy at a time
        conn.execute("CREATE TABLE solo (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO solo SELECT g, 'v' || g FROM generate_series(1, {ROWS}) g")
    tables = ["public.solo"]
    # The copy is killed right after its commit, with a leftover planted before it: the
    # restart finds it committed and removes only the leftover.
    d.proc.start({"STREAMBED_FAILPOINTS": "copy_leftover_file,after_copy_commit"})
    assert d.proc.wait(timeout=300) == -signal.SIGKILL, d.proc.logs()[-3000:]
    planted = list(Path(d.settings.data_dir).rglob("copy-*/*-leftover.parquet"))
    assert len(planted) == 1, planted
    first_run_log = len(d.proc.logs())
    d.proc.start()
    wait_until(lambda: _all_ready(d, tables), 240, "every table copied", d.proc)
    second_run = d.proc.logs()[first_run_log:]
    assert "interrupted copy had committed" in second_run
    assert "copy leftovers removed" in second_run
    assert not planted[0].exists()
    assert "copy started" not in second_run  # not copied again
    for table in tables:
        assert set(_files_under_data(d.settings, table)) == _live_files(d.settings, table)
    wait_lake_equals_source(d.settings, d.url, tables, d.proc, timeout=180)
    assert d.proc.stop() == 0


def test_a_running_streambed_sweeps_old_unreferenced_files(copy_deployment: Deployment) -> None:
    # What a task attempt that wrote after the copy's own cleanup leaves, or a merge whose
    # process died before its commit: `streambed run` removes it at its next sweep once it
    # is older than STREAMBED_SWEEP_MIN_AGE, and keeps a younger one.
    d = copy_deployment
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE swept (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO swept SELECT g, 'v' || g FROM generate_series(1, 1000) g")
    tables = ["public.swept"]
    d.proc.start({"STREAMBED_SWEEP_INTERVAL": str(2 / 3600), "STREAMBED_SWEEP_MIN_AGE": "1"})
    wait_until(lambda: _all_ready(d, tables), 240, "the table copied", d.proc)
    live = _live_files(d.settings, "public.swept")
    directory = Path(next(iter(live)).removeprefix("file://")).parent.parent
    old, young = directory / "old-stray.parquet", directory / "young-stray.parquet"
    # a manifest no snapshot lists (a commit that failed), and a file of another tool
    manifest = directory.parent / "metadata" / f"{uuid.uuid4()}-m0.avro"
    hint = directory.parent / "metadata" / "version-hint.text"
    for stray in (old, young, manifest, hint):
        stray.write_bytes(b"no snapshot references this")
    two_hours_ago = time.time() - 7200
    for stray in (old, manifest, hint):
        os.utime(stray, (two_hours_ago, two_hours_ago))
    wait_until(lambda: not old.exists(), 60, "the old stray file swept", d.proc)
    wait_until(lambda: not manifest.exists(), 60, "the old stray manifest swept", d.proc)
    assert young.exists() and hint.exists()
    assert all(Path(f.removeprefix("file://")).exists() for f in live)
    # the files go before the sweep's summary line is written
    wait_until(lambda: "sweep done" in d.proc.logs(), 60, "the sweep's summary logged", d.proc)
    assert "unreferenced files removed" in d.proc.logs()
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("UPDATE swept SET v = 'after' WHERE id <= 10")
    wait_lake_equals_source(d.settings, d.url, tables, d.proc, timeout=180)
    assert d.proc.stop() == 0


def test_a_table_no_longer_streamed_keeps_being_swept(copy_deployment: Deployment) -> None:
    # A merge that died before its commit left a file in the table, and the table was then
    # left out (STREAMBED_EXCLUDE_TABLES) before any sweep ran: streambed forgets the table
    # but keeps its lake table, and its running sweep still removes the file.
    d = copy_deployment
    with psycopg.connect(d.url, autocommit=True) as conn:
        for name in ("stays", "leaves"):
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {name} SELECT g, 'v' || g FROM generate_series(1, 500) g")
    tables = ["public.stays", "public.leaves"]
    d.proc.start()
    wait_until(lambda: _all_ready(d, tables), 240, "the tables copied", d.proc)
    assert d.proc.stop() == 0
    live = _live_files(d.settings, "public.leaves")
    stray = Path(next(iter(live)).removeprefix("file://")).parent.parent / "old-stray.parquet"
    stray.write_bytes(b"no snapshot references this")
    two_hours_ago = time.time() - 7200
    os.utime(stray, (two_hours_ago, two_hours_ago))
    d.proc.start(
        {
            "STREAMBED_EXCLUDE_TABLES": "public.leaves",
            "STREAMBED_SWEEP_INTERVAL": str(2 / 3600),
            "STREAMBED_SWEEP_MIN_AGE": "1",
        }
    )
    wait_until(lambda: not stray.exists(), 60, "the left table's stray file swept", d.proc)
    logs = d.proc.logs()
    assert "table no longer streamed" in logs and "public.leaves" in logs
    status = _cli(d, "status")
    assert "no longer streamed (lake tables kept, not served, still swept): public.leaves\n" in (
        status
    )
    assert "public.stays" in status
    assert all(Path(f.removeprefix("file://")).exists() for f in live)
    assert _live_files(d.settings, "public.leaves") == live
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("UPDATE stays SET v = 'after' WHERE id <= 10")
    wait_lake_equals_source(d.settings, d.url, ["public.stays"], d.proc, timeout=180)
    assert d.proc.stop() == 0
