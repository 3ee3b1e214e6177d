"""The source catalog on a real Postgres: what rows written before an ADD COLUMN hold."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from streambed.lake.source_catalog import PostgresCatalog, SourceColumn
from tests.fixtures.postgres import PgDatabase

pytestmark = pytest.mark.integration


def _table(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, n int)")
        conn.execute("INSERT INTO t VALUES (1, 1)")
        conn.execute("ALTER TABLE t ADD COLUMN flag boolean NOT NULL DEFAULT true")
        conn.execute("ALTER TABLE t ADD COLUMN stamp timestamptz DEFAULT '2024-01-01 00:00:00+00'")
        conn.execute("ALTER TABLE t ADD COLUMN note text")
        row = conn.execute("SELECT 't'::regclass::oid").fetchone()
    assert row is not None
    return int(row[0])


def _check(columns: dict[str, SourceColumn] | None) -> None:
    assert columns is not None
    flag, stamp, note = (columns[n] for n in ("flag", "stamp", "note"))
    assert flag.has_missing and flag.missing == "t"
    assert stamp.has_missing and stamp.missing is not None
    assert dt.datetime.fromisoformat(stamp.missing) == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert not note.has_missing and note.missing is None


def test_fast_defaults_are_what_old_rows_hold(pg_db: PgDatabase) -> None:
    catalog = PostgresCatalog(pg_db.url)
    try:
        _check(catalog.columns(_table(pg_db.url), {"id", "n"}))
    finally:
        catalog.close()


def test_a_rewrite_between_the_two_lookups_falls_back_to_the_constant_default(
    pg_db: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The column list says a fast default exists; a table rewrite in the source commits
    before its value is read and forgets it (what a burst of ALTERs does while streambed
    follows them): the constant default is what those rows hold, not NULL."""
    oid = _table(pg_db.url)
    catalog = PostgresCatalog(pg_db.url)
    read = catalog._text
    rewrites: list[str] = []

    def rewrite_first(sql: str) -> str | None:
        if "attmissingval" in sql and not rewrites:
            with psycopg.connect(pg_db.url, autocommit=True) as other:
                other.execute("ALTER TABLE t ALTER COLUMN n TYPE bigint")  # rewrites t
            rewrites.append(sql)
        return read(sql)

    monkeypatch.setattr(catalog, "_text", rewrite_first)
    try:
        _check(catalog.columns(oid, {"id", "n"}))
    finally:
        catalog.close()
    assert rewrites
