"""Unchanged TOAST values, schema changes while writes continue, a dropped and re-created
table, TRUNCATE history and a partitioned table, each checked through the query port
against the source's own text rendering."""

from __future__ import annotations

from contextlib import AbstractContextManager

import psycopg
import pytest

from streambed.lake.catalog import open_catalog
from tests.fixtures.background import repeating
from tests.integration.fidelity.conftest import Served

pytestmark = pytest.mark.integration

# ~13 kB of hex digits per value: too big to stay inline, hard to compress, so TOASTed.
BIG = "(SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g)"


def writer(url: str, table: str) -> AbstractContextManager[None]:
    """Keep inserting and updating rows of `table` (columns id, n) until the block ends."""

    def step(conn: psycopg.Connection, i: int) -> None:
        conn.execute(f"INSERT INTO {table} (id, n) VALUES (%s, %s)", (100_000 + i, i))
        conn.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (i % 50 + 1,))

    return repeating(url, step)


def test_unchanged_toast_values_keep_their_stored_value(served: Served) -> None:
    served.start()
    served.execute(
        # REPLICA IDENTITY DEFAULT: unchanged TOAST values are not sent on UPDATE
        "CREATE TABLE docs (id int PRIMARY KEY, n int, body text, extra text)",
        f"INSERT INTO docs SELECT g, g, {BIG}, {BIG} FROM generate_series(1, 20) g",
    )
    query = "SELECT id, n, md5(body), length(body), md5(extra) FROM public.docs ORDER BY id"
    served.wait_equal(query)
    served.execute(
        # in the lake: unchanged values filled from the stored row (Spark merge)
        "UPDATE docs SET n = n + 100 WHERE id <= 10",
        # the key changes and the TOAST values stay: filled from the old key's row
        "UPDATE docs SET id = id + 1000 WHERE id IN (11, 12)",
        # key change, then an update of the moved row, in one transaction
        "BEGIN; UPDATE docs SET id = 2013 WHERE id = 13; UPDATE docs SET n = -1 WHERE id = 2013;"
        " COMMIT",
        # one of two large values changes
        f"UPDATE docs SET extra = {BIG} WHERE id = 14",
        # inserted and updated before a flush: filled from the buffered row
        f"BEGIN; INSERT INTO docs VALUES (50, 0, {BIG}, NULL); UPDATE docs SET n = 1 WHERE id = 50;"
        " COMMIT",
    )
    served.wait_equal(query)
    served.execute("UPDATE docs SET n = n + 1")  # every row, after the moves landed
    served.wait_equal(query)
    served.proc.stop()


def test_schema_changes_are_followed_while_writes_continue(served: Served) -> None:
    served.start(STREAMBED_ON_INCOMPATIBLE_SCHEMA="rewrite")
    served.execute(
        "CREATE TABLE evolving (id int PRIMARY KEY, n int, r real, p numeric(10,2), s int,"
        " old_name text, gone text)",
        "INSERT INTO evolving SELECT g, g, g / 3.0, g * 1.25, g, 'name ' || g, 'x'"
        " FROM generate_series(1, 200) g",
    )
    served.wait_equal("SELECT * FROM public.evolving ORDER BY id")
    with writer(served.url, "evolving"):
        served.execute(
            "ALTER TABLE evolving ADD COLUMN flag boolean NOT NULL DEFAULT true",
            "ALTER TABLE evolving ADD COLUMN note text",
            "ALTER TABLE evolving ADD COLUMN stamp timestamptz DEFAULT '2024-01-01 00:00:00+00'",
        )
        served.execute("ALTER TABLE evolving DROP COLUMN gone")
        served.execute("ALTER TABLE evolving RENAME COLUMN old_name TO new_name")
        served.execute(
            "ALTER TABLE evolving ALTER COLUMN n TYPE bigint",
            "ALTER TABLE evolving ALTER COLUMN r TYPE double precision",
            "ALTER TABLE evolving ALTER COLUMN p TYPE numeric(14,2)",
        )
        served.execute("ALTER TABLE evolving ALTER COLUMN s TYPE text")
        served.execute("UPDATE evolving SET note = 'noted' WHERE id % 7 = 0")
    columns = "id, n, r, p, s, new_name, flag, note, stamp"
    served.wait_equal(f"SELECT {columns} FROM public.evolving ORDER BY id")
    served.proc.stop()
    # The rename stayed a rename: the Iceberg field kept its id.
    table = open_catalog(served.settings).load_table(("public", "evolving"))
    assert table.schema().find_field("new_name").field_id == 6


def test_add_column_with_a_volatile_default_copies_the_table_again(served: Served) -> None:
    """Postgres rewrites the table with a value per row that the WAL never carries: the
    lake table is copied again (online, writes continuing), not left with NULLs."""
    served.execute(
        "CREATE TABLE volatile_t (id int PRIMARY KEY, n int)",
        "INSERT INTO volatile_t SELECT g, g FROM generate_series(1, 200) g",
    )
    served.start()
    served.wait_equal("SELECT * FROM public.volatile_t ORDER BY id", timeout=180)
    with writer(served.url, "volatile_t"):
        served.execute(
            "ALTER TABLE volatile_t ADD COLUMN r double precision DEFAULT random()",
            "ALTER TABLE volatile_t ADD COLUMN added_at timestamptz DEFAULT clock_timestamp()",
        )
        served.execute("UPDATE volatile_t SET n = -n WHERE id % 9 = 0")
    served.wait_equal("SELECT id, n, r, added_at FROM public.volatile_t ORDER BY id", timeout=240)
    assert "resync requested" in served.proc.logs()
    served.proc.stop()


def test_incompatible_type_change_stops_with_a_message_by_default(served: Served) -> None:
    served.start()
    served.execute(
        "CREATE TABLE strict_t (id int PRIMARY KEY, v int)", "INSERT INTO strict_t VALUES (1, 1)"
    )
    served.wait_equal("SELECT * FROM public.strict_t ORDER BY id")
    served.execute(
        "ALTER TABLE strict_t ALTER COLUMN v TYPE text", "INSERT INTO strict_t VALUES (2, 'b')"
    )
    assert served.proc.wait(120) == 3  # EXIT_MANUAL
    assert "STREAMBED_ON_INCOMPATIBLE_SCHEMA=rewrite" in served.proc.logs()


def test_recreated_truncated_and_partitioned_tables(served: Served) -> None:
    served.start()
    served.execute(
        "CREATE TABLE cycle (id int PRIMARY KEY, v text)",
        "INSERT INTO cycle SELECT g, 'old ' || g FROM generate_series(1, 50) g",
        "CREATE TABLE kept (id int PRIMARY KEY, v text)",
        "INSERT INTO kept SELECT g, 'v' || g FROM generate_series(1, 30) g",
        "CREATE TABLE measures (id int, day date, v int, PRIMARY KEY (id, day))"
        " PARTITION BY RANGE (day)",
        "CREATE TABLE measures_2023 PARTITION OF measures"
        " FOR VALUES FROM ('2023-01-01') TO ('2024-01-01')",
        "CREATE TABLE measures_2024 PARTITION OF measures"
        " FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')",
        "CREATE TABLE measures_2025 PARTITION OF measures"
        " FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')",
        "INSERT INTO measures SELECT g, DATE '2023-06-01' + g * 3, g"
        " FROM generate_series(1, 150) g",
    )
    served.wait_equal("SELECT * FROM public.cycle ORDER BY id")
    served.wait_equal("SELECT * FROM public.kept ORDER BY id")
    served.wait_equal("SELECT * FROM public.measures ORDER BY id, day")
    catalog = open_catalog(served.settings)
    history = len(catalog.load_table(("public", "kept")).snapshots())

    served.execute(
        "DROP TABLE cycle",
        "CREATE TABLE cycle (id int PRIMARY KEY, label text, w int)",
        "INSERT INTO cycle SELECT g, 'new ' || g, g FROM generate_series(40, 60) g",
        "TRUNCATE kept",
        "INSERT INTO kept VALUES (1000, 'after truncate')",
        # rows move between partitions: delete from one, insert into the other, one table
        "UPDATE measures SET day = day + 200 WHERE id % 5 = 0",
        "DELETE FROM measures WHERE id % 7 = 0",
    )
    served.wait_equal("SELECT * FROM public.cycle ORDER BY id")
    served.wait_equal("SELECT * FROM public.kept ORDER BY id")
    served.wait_equal("SELECT * FROM public.measures ORDER BY id, day")
    served.proc.stop()
    assert not catalog.table_exists(("public", "measures_2023"))
    assert not catalog.table_exists(("public", "measures_2024"))
    assert not catalog.table_exists(("public", "measures_2025"))
    kept = catalog.load_table(("public", "kept"))
    assert len(kept.snapshots()) > history  # TRUNCATE added a snapshot, kept the old ones
    assert (
        kept.snapshots()[0].snapshot_id
        == catalog.load_table(("public", "kept")).snapshots()[0].snapshot_id
    )
    cycle = catalog.load_table(("public", "cycle"))
    assert [f.name for f in cycle.schema().fields] == ["id", "label", "w"]
