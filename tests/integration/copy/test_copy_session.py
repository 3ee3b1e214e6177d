"""The sessions a copy reads in, on a real Postgres: the replication session's output
settings, and no JIT (`streambed.copy.session.COPY_OPTIONS`), whatever the URL asks for."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from psycopg import sql

from streambed.copy.client import find_psql, stream_copy
from streambed.copy.duck import stream_range
from streambed.copy.snapshot import SnapshotAnchor
from tests.fixtures.postgres import PgDatabase

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
