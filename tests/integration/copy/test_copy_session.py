"""The sessions a copy reads in, on a real Postgres: the replication session's output
settings, and no JIT (`streambed.source.copy_session.COPY_OPTIONS`), whatever the URL asks for."""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from psycopg import sql

from streambed.copy.client import CopyClientError, find_psql, stream_copy
from streambed.copy.duck import detach_all, stream_range
from streambed.source.snapshot import SnapshotAnchor
from tests.fixtures.postgres import PgDatabase, ThrowawayPostgres

SETTINGS = ("jit", "TimeZone", "DateStyle", "extra_float_digits")
EXPECTED = ["off", "UTC", "ISO, MDY", "3"]
QUERY = "SELECT " + ", ".join(f"current_setting('{s}') AS s{i}" for i, s in enumerate(SETTINGS))


def _url_asking_for_jit(pg_db: PgDatabase) -> str:
    """The database's URL with options turning JIT on (and cheap), as a user's might."""
    return pg_db.url + "?options=-c%20jit%3Don%20-c%20jit_above_cost%3D0"


@pytest.mark.parametrize("reader", ["duckdb", "psql", "psycopg"])
def test_a_copy_reads_with_the_stream_settings_and_no_jit(pg_db: PgDatabase, reader: str) -> None:
    url = _url_asking_for_jit(pg_db)
    assert reader != "psql" or find_psql() is not None
    anchor = SnapshotAnchor.from_temporary_slot(url)
    try:
        assert anchor.conn.execute("SHOW jit").fetchone() == ("off",)
        if reader == "duckdb":
            batches = stream_range(url, anchor.snapshot_name, QUERY, application_name="test")
        else:
            statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(sql.SQL(QUERY))
            batches = stream_copy(
                url,
                anchor.snapshot_name,
                statement,
                [pa.binary()] * len(SETTINGS),
                application_name="test",
                batch_bytes=1024 * 1024,
                psql=find_psql() if reader == "psql" else None,
            )
        rows = [row for batch in batches for row in batch.to_pylist()]
    finally:
        anchor.close()
    assert len(rows) == 1
    values = [v.decode() if isinstance(v, bytes) else v for v in rows[0].values()]
    assert values == EXPECTED


@pytest.mark.parametrize("reader", ["duckdb", "psql"])
def test_a_reading_copy_keeps_the_password_off_disk(
    pg_db: PgDatabase, reader: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The password (DuckDB's password file, psql's service file) is in memory only: a copy
    task killed while it reads leaves nothing behind (`session.secret_file`)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    query = "SELECT g FROM generate_series(1, 200000) g"
    anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
    try:
        if reader == "duckdb":
            batches = stream_range(
                pg_db.url, anchor.snapshot_name, query, application_name="test", batch_rows=1000
            )
        else:
            batches = stream_copy(
                pg_db.url,
                anchor.snapshot_name,
                sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(sql.SQL(query)),
                [pa.int64()],
                application_name="test",
                batch_bytes=64 * 1024,
                psql=find_psql(),
            )
        first = next(batches)  # connected with the password and reading
        assert list(scratch.iterdir()) == []
        rest = sum(batch.num_rows for batch in batches)
    finally:
        anchor.close()
    assert first.num_rows + rest == 200000


BACKEND = "SELECT pg_backend_pid() AS pid, current_setting('application_name') AS name"


def _backend(url: str, snapshot: str, name: str) -> tuple[int, str]:
    rows = [
        r
        for b in stream_range(url, snapshot, BACKEND, application_name=name)
        for r in b.to_pylist()
    ]
    assert len(rows) == 1
    return rows[0]["pid"], rows[0]["name"]


def _named(pg_db: PgDatabase, pid: int) -> list[tuple[str, str]]:
    return pg_db.psql("SELECT application_name, state FROM pg_stat_activity WHERE pid = %s", (pid,))


def test_the_duckdb_reader_keeps_its_connection_from_one_range_to_the_next(
    pg_db: PgDatabase,
) -> None:
    """A worker's ranges read on one connection, each named for its range while it reads
    and `streambed-copy` between ranges (progress counts only the named ones)."""
    anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
    try:
        first = _backend(pg_db.url, anchor.snapshot_name, "streambed-copy run/0")
        assert _named(pg_db, first[0]) == [("streambed-copy", "idle")]
        second = _backend(pg_db.url, anchor.snapshot_name, "streambed-copy run/1")
    finally:
        anchor.close()
    assert first == (second[0], "streambed-copy run/0")
    assert second[1] == "streambed-copy run/1"


def test_each_copy_thread_keeps_a_connection_of_its_own(pg_db: PgDatabase) -> None:
    """The copy manager's threads read side by side in streambed's process, each on its own
    kept connection. One shared attachment would fail the second thread: DuckDB's pool
    opens it a connection of its own, and the password file is gone by then."""
    anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
    both = threading.Barrier(2, timeout=60)

    def two_ranges(thread: int) -> tuple[int, int]:
        first, _ = _backend(pg_db.url, anchor.snapshot_name, f"streambed-copy run/{thread}")
        both.wait()  # both threads hold their attachments now
        second, _ = _backend(pg_db.url, anchor.snapshot_name, f"streambed-copy run/{thread + 2}")
        return first, second

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            (a, a_again), (b, b_again) = pool.map(two_ranges, [0, 1])
    finally:
        anchor.close()
    assert a == a_again and b == b_again and a != b
    assert _named(pg_db, a) == _named(pg_db, b) == [("streambed-copy", "idle")]
    detach_all()  # as the copy manager does once its copy threads are done
    assert _named(pg_db, a) == _named(pg_db, b) == []


def test_a_kept_connection_ended_while_idle_is_replaced_and_the_range_read(
    pg_db: PgDatabase,
) -> None:
    anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
    try:
        pid, _ = _backend(pg_db.url, anchor.snapshot_name, "streambed-copy run/0")
        assert pg_db.psql("SELECT pg_terminate_backend(%s)", (pid,)) == [(True,)]
        rows = stream_range(
            pg_db.url,
            anchor.snapshot_name,
            "SELECT g, pg_backend_pid() AS pid FROM generate_series(1, 1000) g",
            application_name="streambed-copy run/1",
        )
        table = pa.Table.from_batches(list(rows))
    finally:
        anchor.close()
    assert table.column("g").to_pylist() == list(range(1, 1001))
    assert set(table.column("pid").to_pylist()) != {pid}


def test_a_range_failing_on_a_kept_connection_is_not_read_again_and_detaches_it(
    pg_db: PgDatabase,
) -> None:
    """An error after rows were read is the range's (no second attempt), and the next
    range connects anew: the failed connection may be in any state."""
    query = "SELECT 1 / (200000 - g) AS v FROM generate_series(1, 200000) g"
    anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
    try:
        pid, _ = _backend(pg_db.url, anchor.snapshot_name, "streambed-copy run/0")
        batches = stream_range(
            pg_db.url, anchor.snapshot_name, query, application_name="run/1", batch_rows=1000
        )
        with pytest.raises(CopyClientError, match="division by zero"):
            for _ in batches:
                pass
        after, _ = _backend(pg_db.url, anchor.snapshot_name, "streambed-copy run/2")
    finally:
        anchor.close()
    assert after != pid
    assert _named(pg_db, pid) == []  # detached: its backend has ended


def test_a_range_of_another_source_detaches_the_kept_connection(
    pg_db: PgDatabase, pg_server: ThrowawayPostgres
) -> None:
    other = pg_server.create_database(f"{pg_db.name}_other")
    try:
        anchor = SnapshotAnchor.from_temporary_slot(pg_db.url)
        try:
            pid, _ = _backend(pg_db.url, anchor.snapshot_name, "streambed-copy run/0")
        finally:
            anchor.close()
        anchor = SnapshotAnchor.from_temporary_slot(pg_server.url(other))
        try:
            there, _ = _backend(pg_server.url(other), anchor.snapshot_name, "streambed-copy b/0")
        finally:
            anchor.close()
        assert there != pid
        assert _named(pg_db, pid) == []
    finally:
        pg_server.drop_database(other)
