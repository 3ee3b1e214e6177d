"""Spark is started early (`streambed.commands.prestart`) only when a table is too large to be
copied in streambed's process: the source is asked for its largest table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from streambed.commands.prestart import spark_needed
from streambed.core.config import Settings
from tests.fixtures.postgres import PgDatabase, free_port
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import slot_exists, wait_lake_equals_source, wait_until

pytestmark = pytest.mark.integration

BLOCK = 8192


def _settings(url: str, tmp_path: Path, local_bytes: int) -> Settings:
    return Settings(source_url=url, data_dir=tmp_path, copy_local_bytes=local_bytes)


def _create(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _size(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT pg_relation_size(%s::regclass) + coalesce(pg_relation_size("
            "nullif((SELECT reltoastrelid FROM pg_class WHERE oid = %s::regclass), 0)), 0)",
            (table, table),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_spark_is_needed_only_for_a_table_over_the_line(pg_db: PgDatabase, tmp_path: Path) -> None:
    url = pg_db.url
    assert not spark_needed(_settings(url, tmp_path, 8 * 1024 * 1024))  # no table at all
    _create(
        url,
        "CREATE TABLE small (id int PRIMARY KEY, v text)",
        "INSERT INTO small SELECT g, 'x' FROM generate_series(1, 100) g",
        "CREATE SCHEMA shop",
        "CREATE TABLE shop.docs (id int PRIMARY KEY, body text)",
        # out of line: its size is in its TOAST table
        "ALTER TABLE shop.docs ALTER COLUMN body SET STORAGE EXTERNAL",
        "INSERT INTO shop.docs SELECT g, repeat(md5(g::text), 400) FROM generate_series(1, 40) g",
    )
    docs = _size(url, "shop.docs")
    assert docs > 4 * BLOCK  # mostly TOAST: the heap holds a few pointers
    assert not spark_needed(_settings(url, tmp_path, docs))
    assert spark_needed(_settings(url, tmp_path, docs - 1))
    assert spark_needed(_settings(url, tmp_path, 0))  # 0: every copy runs on Spark


def test_a_partitioned_table_counts_all_its_partitions(pg_db: PgDatabase, tmp_path: Path) -> None:
    url = pg_db.url
    _create(
        url,
        "CREATE TABLE events (id int, at date, v text, PRIMARY KEY (id, at)) "
        "PARTITION BY RANGE (at)",
        "CREATE TABLE events_1 PARTITION OF events "
        "FOR VALUES FROM ('2024-01-01') TO ('2024-02-01')",
        "CREATE TABLE events_2 PARTITION OF events "
        "FOR VALUES FROM ('2024-02-01') TO ('2024-03-01')",
        "INSERT INTO events SELECT g, '2024-01-01'::date + g % 59, repeat('y', 100) "
        "FROM generate_series(1, 2000) g",
    )
    largest = max(_size(url, "events_1"), _size(url, "events_2"))
    total = _size(url, "events_1") + _size(url, "events_2")
    assert largest < total
    # Each partition fits under the line, but the table is copied whole (table_info).
    assert spark_needed(_settings(url, tmp_path, largest))
    assert not spark_needed(_settings(url, tmp_path, total))


def test_only_the_tables_the_start_will_copy_count(pg_db: PgDatabase, tmp_path: Path) -> None:
    """A large table outside the publication, or excluded by configuration, is never
    copied: it does not start Spark."""
    url = pg_db.url
    _create(
        url,
        "CREATE TABLE small (id int PRIMARY KEY, v text)",
        "CREATE TABLE audit (id int PRIMARY KEY, v text)",
        "INSERT INTO audit SELECT g, md5(g::text) FROM generate_series(1, 2000) g",
    )
    limit = _size(url, "audit") - 1
    settings = _settings(url, tmp_path, limit)
    assert spark_needed(settings)  # no publication yet: the start creates it for all tables
    assert not spark_needed(replace(settings, exclude_tables=("public.audit",)))
    assert not spark_needed(replace(settings, include_tables=("public.sm*",)))
    _create(url, "CREATE PUBLICATION streambed FOR TABLE small")
    assert not spark_needed(settings)
    _create(url, "ALTER PUBLICATION streambed ADD TABLE audit")
    assert spark_needed(settings)
    assert not spark_needed(replace(settings, exclude_tables=("public.audit",)))


def test_a_source_that_cannot_be_asked_starts_spark(tmp_path: Path) -> None:
    url = f"postgresql://nobody:pw@127.0.0.1:{free_port()}/none"
    assert spark_needed(_settings(url, tmp_path, 8 * 1024 * 1024))


def test_a_first_start_with_a_large_table_starts_spark_before_its_slot(
    local_deployment: Deployment,
) -> None:
    d = local_deployment
    _create(
        d.url,
        "CREATE TABLE big (id int PRIMARY KEY, v text)",
        "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 20000) g",
    )
    d.proc.start({"STREAMBED_COPY_LOCAL_BYTES": str(BLOCK)})  # big is over the line
    wait_until(lambda: slot_exists(d.url), 120, "the replication slot", d.proc)
    wait_until(lambda: "copy committed" in d.proc.logs(), 240, "the copy", d.proc)
    logs = d.proc.logs()
    assert logs.count("starting spark") == 1
    assert logs.index("starting spark") < logs.index("created replication slot")
    assert d.proc.stop() == 0


def _copy_connections(url: str) -> int:
    """Connections of copy readers to this database (DuckDB's, named `streambed-copy` or
    for their range; other tests' in this process may hold some to their databases)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
            "(application_name = 'streambed-copy' OR application_name LIKE 'streambed-copy %/%')"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_first_start_of_small_tables_copies_them_without_spark_and_closes_its_reads(
    local_deployment: Deployment,
) -> None:
    """Each copy thread reads its tables on one connection it keeps from table to table;
    the connections close once the copies are done, not a minute later (when DuckDB's
    pool would close them idle)."""
    d = local_deployment
    tables = [f"public.small_{i}" for i in range(8)]
    _create(
        d.url,
        *[f"CREATE TABLE {t} (id int PRIMARY KEY, v text)" for t in tables],
        *[f"INSERT INTO {t} SELECT g, md5(g::text) FROM generate_series(1, 500) g" for t in tables],
    )
    d.proc.start()
    wait_lake_equals_source(d.settings, d.url, tables, d.proc)
    wait_until(lambda: _copy_connections(d.url) == 0, 30, "the copy connections closed", d.proc)
    logs = d.proc.logs()
    assert logs.count("copy committed") == len(tables)
    assert "starting spark" not in logs
    assert d.proc.stop() == 0
