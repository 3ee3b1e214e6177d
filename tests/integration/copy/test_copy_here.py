"""A table's copy in streambed's own process (`job.copies_here`, `streambed.copy.here`): its
ranges read by threads, no Spark, on a real Postgres and on the local warehouse and S3."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest

from streambed.copy import here, job
from streambed.copy.catalog import table_info
from streambed.copy.duck import detach_all
from streambed.copy.job import CopyResult, copy_table, lake_table, output_dir
from streambed.core.config import Settings
from streambed.core.errors import Kind, SchemaError, SourceError, StreambedError
from streambed.lake.catalog import open_catalog
from streambed.lake.commit import frontier
from streambed.source.snapshot import SnapshotAnchor
from streambed.spark.data_source import filesystem, fs_options
from tests.fixtures.postgres import PgDatabase, ThrowawayPostgres

LIMIT = 8 * 1024 * 1024
ROWS = 3000


def _small(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, code char(3), v text, n numeric)")
        conn.execute(
            f"INSERT INTO {name} SELECT g, 'a', CASE WHEN g % 5 = 0 THEN NULL ELSE md5(g::text) "
            f"END, g / 7.0 FROM generate_series(1, {ROWS}) g"
        )
        conn.execute(f"ANALYZE {name}")


def _copy(settings: Settings, anchor: SnapshotAnchor, name: str, limit: int) -> CopyResult:
    catalog = open_catalog(settings)
    info = table_info(anchor.conn, "public", name)
    return copy_table(
        None,
        lake_table(catalog, info),
        info,
        url=settings.source_url,
        snapshot=anchor.snapshot_name,
        frontier=anchor.frontier,
        run_id=uuid.uuid4().hex[:12],
        fs_options=fs_options(settings),
        local_bytes=limit,
    )


def _copy_connections(pg_db: PgDatabase) -> list[tuple[str]]:
    return [
        (str(r[0]),)
        for r in pg_db.psql(
            "SELECT application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'streambed-copy%%' "
            "AND application_name <> 'streambed-copy anchor'"
        )
    ]


def test_a_small_table_is_copied_without_spark_in_one_file(
    settings: Settings, pg_db: PgDatabase
) -> None:
    url = settings.source_url
    _small(url, "small")
    anchor = SnapshotAnchor.from_temporary_slot(url)
    try:
        result = _copy(settings, anchor, "small", LIMIT)
    finally:
        anchor.close()
    assert result.rows == ROWS and result.files == 1
    table = open_catalog(settings).load_table(("public", "small"))
    assert frontier(table) == anchor.frontier and len(table.history()) == 1
    (task,) = table.scan().plan_files()
    assert task.file.file_path.startswith(output_dir(table, "").rsplit("-", 1)[0])
    fs, path = filesystem(task.file.file_path, fs_options(settings))
    assert pq.read_metadata(path, filesystem=fs).num_rows == ROWS
    lake = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    with psycopg.connect(url) as conn:
        source = conn.execute("SELECT id, code, v, n::text FROM small ORDER BY id").fetchall()
    assert [(r["id"], r["code"], r["v"], str(r["n"])) for r in lake] == [
        (i, c, v, n) for i, c, v, n in source
    ]
    assert _copy_connections(pg_db) == [("streambed-copy",)]  # kept for the thread's next
    detach_all()
    assert _copy_connections(pg_db) == []


@pytest.fixture
def two_range_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Two range threads of their own, whatever the machine's cores."""
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-range")
    monkeypatch.setattr(here, "_range_pool", lambda threads: pool)
    monkeypatch.setattr(job, "range_threads", lambda: 2)
    yield
    detach_all()
    pool.shutdown()


def _filled(url: str, name: str, rows: int, last: str = "2024-01-01") -> None:
    """`rows` rows of about 170 bytes, the last one's `at` being `last`."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text, at timestamp)")
        conn.execute(
            f"INSERT INTO {name} SELECT g, repeat(md5(g::text), 4), '2024-01-01' "
            f"FROM generate_series(1, {rows - 1}) g"
        )
        conn.execute(f"INSERT INTO {name} VALUES ({rows}, 'last', %s)", (last,))
        conn.execute(f"ANALYZE {name}")


def test_a_table_is_copied_in_a_range_a_thread(
    settings: Settings, pg_db: PgDatabase, two_range_threads: None
) -> None:
    url = settings.source_url
    _filled(url, "filled", 40_000)  # about 7 MiB: two ranges of at least 2 MiB
    anchor = SnapshotAnchor.from_temporary_slot(url)
    try:
        result = _copy(settings, anchor, "filled", 64 * 1024 * 1024)
    finally:
        anchor.close()
    assert result.rows == 40_000 and result.files == 2
    table = open_catalog(settings).load_table(("public", "filled"))
    assert frontier(table) == anchor.frontier and len(table.history()) == 1
    per_file = []
    for task in sorted(table.scan().plan_files(), key=lambda t: t.file.file_path):
        fs, path = filesystem(task.file.file_path, fs_options(settings))
        per_file.append(pq.read_table(path, filesystem=fs).column("id").to_pylist())
    assert len(per_file) == 2 and all(per_file)
    assert max(per_file[0]) < min(per_file[1])  # range order: the heap's first half first
    assert sorted(per_file[0] + per_file[1]) == list(range(1, 40_001))
    assert _copy_connections(pg_db) == [("streambed-copy",)] * 2  # one a range thread
    detach_all()
    assert _copy_connections(pg_db) == []


def test_small_tables_copied_two_at_a_time_each_thread_on_its_connection(
    pg_db: PgDatabase, tmp_path: Path
) -> None:
    """The copy manager's threads copy small tables side by side in one process, each
    thread on the one connection it keeps from table to table."""
    settings = Settings(source_url=pg_db.url, data_dir=tmp_path)
    names = [f"small_{i}" for i in range(6)]
    for name in names:
        _small(pg_db.url, name)
    anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
    catalog = open_catalog(settings)
    infos = [table_info(anchor.conn, "public", n) for n in names]
    tables = [lake_table(catalog, info) for info in infos]  # created one at a time
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(
                pool.map(
                    lambda pair: copy_table(
                        None,
                        pair[0],
                        pair[1],
                        url=pg_db.url,
                        snapshot=anchor.snapshot_name,
                        frontier=anchor.frontier,
                        run_id=uuid.uuid4().hex[:12],
                        fs_options={},
                        local_bytes=LIMIT,
                    ),
                    zip(tables, infos, strict=True),
                )
            )
    finally:
        anchor.close()
    assert [r.rows for r in results] == [ROWS] * len(names)
    for name in names:
        table = catalog.load_table(("public", name))
        ids = sorted(table.scan().to_arrow().column("id").to_pylist())
        assert ids == list(range(1, ROWS + 1))
    kept = _copy_connections(pg_db)
    assert kept in ([("streambed-copy",)], [("streambed-copy",)] * 2), kept  # one a thread
    detach_all()
    assert _copy_connections(pg_db) == []


def test_a_table_over_the_limit_is_not_copied_without_spark(
    pg_db: PgDatabase, tmp_path: Path
) -> None:
    settings = Settings(source_url=pg_db.url, data_dir=tmp_path)
    _small(pg_db.url, "small")
    anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
    try:
        with pytest.raises(StreambedError, match="a non-empty table needs Spark to copy"):
            _copy(settings, anchor, "small", 8192)  # one block: smaller than the table
    finally:
        anchor.close()


@pytest.mark.parametrize("rows", [2, 40_000])  # one range; two, the value in the second
def test_a_value_the_lake_cannot_store_stops_the_copy_and_leaves_no_file(
    pg_db: PgDatabase, tmp_path: Path, two_range_threads: None, rows: int
) -> None:
    settings = Settings(source_url=pg_db.url, data_dir=tmp_path)
    _filled(pg_db.url, "far", rows, last="294247-01-10 04:00:54.775808")
    anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
    try:
        with pytest.raises(SchemaError, match="cannot be stored exactly"):
            _copy(settings, anchor, "far", 64 * 1024 * 1024)
    finally:
        anchor.close()
    table = open_catalog(settings).load_table(("public", "far"))
    assert table.current_snapshot() is None  # nothing committed
    copies = Path(output_dir(table, "x").removeprefix("file://")).parent
    assert list(copies.rglob("*.parquet")) == []
    # The failed range's connection is closed; a range that finished keeps its own, idle.
    kept = _copy_connections(pg_db)
    assert kept == [] or (rows > 2 and kept == [("streambed-copy",)]), kept
    detach_all()
    assert _copy_connections(pg_db) == []


def test_a_source_shutting_down_is_waited_for(tmp_path: Path) -> None:
    """A source that is stopping refuses the copy's connection with a FATAL of its own:
    the copy reports the source unreachable, which the copy manager waits out, and does
    not give the table up (as the CI run of 2026-11-28 saw it do)."""
    with ThrowawayPostgres() as pg:
        url = pg.url()
        settings = Settings(source_url=url, data_dir=tmp_path)
        _small(url, "small")
        anchor = SnapshotAnchor.from_temporary_slot(url)
        try:
            pg.begin_smart_shutdown()  # waits for the anchor's session
            with pytest.raises(SourceError) as failed:
                _copy(settings, anchor, "small", LIMIT)
        finally:
            anchor.close()
            pg.stop_server()
    assert failed.value.kind is Kind.SOURCE_UNREACHABLE
    assert "the database system is shutting down" in str(failed.value)
    assert "could not connect" in str(failed.value)
