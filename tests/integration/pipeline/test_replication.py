"""`streambed run` against real Postgres, Spark and Iceberg: the lake equals the source."""

from __future__ import annotations

import psycopg
import pytest

from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import slot_exists, wait_lake_equals_source, wait_until

pytestmark = pytest.mark.integration

TABLES = ["public.ints", "public.pairs", "shop.words"]

SCHEMA = """
CREATE TABLE ints (id int PRIMARY KEY, name text, amount numeric(12,2), at timestamptz);
CREATE TABLE pairs (a int, b text, v text, PRIMARY KEY (a, b));
CREATE SCHEMA shop;
CREATE TABLE shop.words (word text PRIMARY KEY, n bigint, note varchar(20));
"""


def execute(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def start(d: Deployment) -> None:
    d.proc.start()
    wait_until(lambda: slot_exists(d.url), 120, "the replication slot", d.proc)


def test_every_kind_of_change_lands_exactly(any_deployment: Deployment) -> None:
    d = any_deployment
    execute(d.url, SCHEMA)
    start(d)
    execute(
        d.url,
        "INSERT INTO ints SELECT g, 'name ' || g, g * 1.25, "
        "'2024-01-01 00:00:00+00'::timestamptz + g * interval '1 minute' "
        "FROM generate_series(1, 5000) g",
        "INSERT INTO pairs SELECT g % 50, 'b' || (g / 50), 'v' || g "
        "FROM generate_series(1, 2000) g",
        "INSERT INTO shop.words SELECT 'w' || g, g, NULL FROM generate_series(1, 300) g",
    )
    # A multi-table transaction, then updates (with key changes) and deletes.
    execute(
        d.url,
        "BEGIN; INSERT INTO ints VALUES (-1, 'multi', 1.00, now()); "
        "UPDATE pairs SET v = 'multi' WHERE a = 1; "
        "DELETE FROM shop.words WHERE n % 7 = 0; COMMIT",
    )
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    execute(
        d.url,
        "UPDATE ints SET name = 'updated', amount = amount * 2 WHERE id % 10 = 0",
        "UPDATE ints SET id = id + 100000 WHERE id BETWEEN 100 AND 120",
        "UPDATE pairs SET b = b || '-moved' WHERE a = 2",
        "UPDATE shop.words SET word = upper(word), note = 'renamed' WHERE n < 20",
        "DELETE FROM ints WHERE id BETWEEN 4000 AND 4100",
        "DELETE FROM pairs WHERE a = 3",
        # delete then insert the same key in one transaction
        "BEGIN; DELETE FROM ints WHERE id = 7; INSERT INTO ints VALUES (7, 'again', 7, now()); "
        "COMMIT",
    )
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    # A truncate, followed by new rows in the same transaction and after it.
    execute(
        d.url,
        "BEGIN; TRUNCATE pairs; INSERT INTO pairs VALUES (1, 'after', 'truncate'); COMMIT",
        "INSERT INTO pairs VALUES (2, 'later', 'x')",
    )
    # A large streamed transaction that rolls back, and a 200k-row one that commits.
    with psycopg.connect(d.url) as conn:
        conn.execute(
            "INSERT INTO ints SELECT g, 'rolled back', 0, now() "
            "FROM generate_series(200000, 260000) g"
        )
        conn.execute("UPDATE shop.words SET n = -n")
        conn.rollback()
    execute(
        d.url,
        "INSERT INTO ints SELECT g, 'big', g % 1000, now() FROM generate_series(300000, 499999) g",
    )
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    assert d.proc.stop() == 0
    assert "flushed" in d.proc.logs()


def test_a_stopped_pipeline_resumes_where_it_left_off(local_deployment: Deployment) -> None:
    d = local_deployment
    execute(d.url, SCHEMA)
    start(d)
    execute(d.url, "INSERT INTO ints SELECT g, 'x', g, now() FROM generate_series(1, 1000) g")
    wait_lake_equals_source(d.settings, d.url, ["public.ints"], d.proc)
    assert d.proc.stop() == 0
    first = d.proc.logs()
    # Its tables are small, copied in streambed's process, and the stream only appended:
    # Spark was not needed, so it was not started (streambed.commands.prestart).
    assert "starting spark" not in first
    # Changes while streambed is down are waiting in the slot.
    execute(
        d.url,
        "UPDATE ints SET name = 'while down' WHERE id <= 500",
        "DELETE FROM ints WHERE id > 900",
        "INSERT INTO pairs VALUES (1, 'a', 'b')",
    )
    # the merge must run on Spark: a rewrite, not a delete file
    d.proc.start({"STREAMBED_MERGE_LOCAL_BYTES": "0", "STREAMBED_WRITE_MODE": "copy-on-write"})
    wait_lake_equals_source(d.settings, d.url, ["public.ints", "public.pairs"], d.proc)
    # Every table is ready: Spark starts when a merge needs it, after streaming has begun.
    second = d.proc.logs()[len(first) :]
    assert second.index("replication started") < second.index("starting spark")


def test_postgres_restart_during_streaming_is_survived(
    local_deployment: Deployment, pg_server: object
) -> None:
    from tests.fixtures.postgres import ThrowawayPostgres

    assert isinstance(pg_server, ThrowawayPostgres)
    d = local_deployment
    execute(d.url, SCHEMA)
    start(d)
    execute(d.url, "INSERT INTO ints SELECT g, 'x', g, now() FROM generate_series(1, 2000) g")
    # Streaming, not copying (tests/integration/copy/test_source_outage.py has the copy).
    wait_lake_equals_source(d.settings, d.url, ["public.ints"], d.proc)
    pg_server.restart(mode="immediate")
    execute(
        d.url,
        "UPDATE ints SET name = 'after restart' WHERE id % 3 = 0",
        "INSERT INTO ints SELECT g, 'y', g, now() FROM generate_series(2001, 3000) g",
    )
    wait_lake_equals_source(d.settings, d.url, ["public.ints"], d.proc)
    assert d.proc.running  # it rode out the restart instead of exiting
    assert d.proc.stop() == 0


def test_tables_without_primary_key(local_deployment: Deployment) -> None:
    d = local_deployment
    execute(
        d.url,
        "CREATE TABLE events (at int, what text)",
        "CREATE TABLE full_rows (a int, b text)",
        "ALTER TABLE full_rows REPLICA IDENTITY FULL",
    )
    start(d)
    execute(
        d.url,
        "INSERT INTO events SELECT g % 10, 'e' FROM generate_series(1, 100) g",
        "INSERT INTO full_rows VALUES (1, 'a'), (1, 'a'), (2, 'b'), (3, NULL), (4, 'd')",
    )
    wait_lake_equals_source(d.settings, d.url, ["public.events", "public.full_rows"], d.proc)
    execute(
        d.url,
        # ctid picks ONE of two identical rows: the lake must keep the other
        "DELETE FROM full_rows WHERE ctid = (SELECT min(ctid) FROM full_rows WHERE a = 1)",
        "UPDATE full_rows SET b = 'was null' WHERE a = 3",
        "DELETE FROM full_rows WHERE a = 4",
    )
    wait_lake_equals_source(d.settings, d.url, ["public.events", "public.full_rows"], d.proc)
