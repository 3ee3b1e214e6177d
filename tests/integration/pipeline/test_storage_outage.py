"""The object store goes away while `streambed run` streams and comes back: the process
waits, nothing is acknowledged that is not in the lake, and the lake then equals the source."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.background import repeating
from tests.fixtures.postgres import PgDatabase
from tests.fixtures.proxy import TcpProxy
from tests.fixtures.s3 import ThrowawayS3
from tests.integration.copy.test_resync import _resync as resync
from tests.integration.pipeline.conftest import Deployment, deployment
from tests.integration.pipeline.harness import (
    slot_confirmed,
    wait_lake_equals_source,
    wait_until,
)
from tests.integration.pipeline.test_replication import SCHEMA, TABLES, execute, start

pytestmark = pytest.mark.integration

RETRYING = "storage failed, retrying"
COPY_RETRY = "copy failed in Spark or storage"


@pytest.fixture
def proxied(
    pg_db: PgDatabase, tmp_path: Path, s3_server: ThrowawayS3
) -> Iterator[tuple[Deployment, TcpProxy]]:
    """A deployment whose S3 endpoint is a proxy in front of the test's SeaweedFS."""
    host, port = s3_server.endpoint.split("://", 1)[1].rsplit(":", 1)
    with TcpProxy((host, int(port))) as proxy:
        d = deployment(pg_db, tmp_path, s3_server, s3_server.new_bucket())
        d.env["STREAMBED_S3_ENDPOINT"] = f"http://{proxy.address}"
        d.proc.env["STREAMBED_S3_ENDPOINT"] = f"http://{proxy.address}"
        try:
            yield d, proxy
        finally:
            d.proc.kill()


def test_streaming_waits_out_a_storage_outage(proxied: tuple[Deployment, TcpProxy]) -> None:
    d, proxy = proxied
    execute(d.url, SCHEMA)
    execute(d.url, "INSERT INTO ints SELECT g, 'v1', g, now() FROM generate_series(1, 2000) g")
    start(d)
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)  # read around the proxy
    proxy.cut()
    before = changed_at(d.url, "UPDATE ints SET name = 'v2' WHERE id % 3 = 0")
    execute(
        d.url,
        "BEGIN; DELETE FROM ints WHERE id <= 50; "
        "INSERT INTO pairs SELECT g % 5, 'b' || g, 'v' FROM generate_series(1, 300) g; COMMIT",
        "INSERT INTO shop.words SELECT 'w' || g, g, 'n' FROM generate_series(1, 100) g",
    )
    wait_until(lambda: d.proc.logs().count(RETRYING) >= 2, 120, "retries", d.proc)
    # Nothing was acknowledged while no flush could commit.
    assert confirmed_at_most(d.url, before)
    assert d.proc.running

    proxy.restore()
    execute(d.url, "UPDATE ints SET amount = -amount WHERE id > 1900")
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    assert not confirmed_at_most(d.url, before)
    assert d.proc.stop() == 0
    assert "storage is back" in d.proc.logs()


def test_a_copy_taken_while_storage_fails_loses_no_change(local_deployment: Deployment) -> None:
    """The lake cannot be loaded when the loop takes a finished copy (`streambed resync`;
    the failpoint, four times). Until it is taken, the table stays blocked and the loop drops its
    changes, to read them again then; meanwhile another table's flushes acknowledge the
    slot, which the copy's hold must keep from passing the dropped changes."""
    d = local_deployment
    execute(
        d.url,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v1' FROM generate_series(1, 20000) g",
        "CREATE TABLE u (id serial PRIMARY KEY, at timestamptz)",
    )
    tables = ["public.t", "public.u"]
    start(d)
    wait_lake_equals_source(d.settings, d.url, tables, d.proc)
    assert d.proc.stop() == 0

    d.proc.start({"STREAMBED_FAILPOINTS": "copy_taken_storage_error:1-4"})
    with repeating(d.url, lambda conn, _: conn.execute("INSERT INTO u (at) VALUES (now())"), 0.05):
        resync(d, "public.t")
        copying = "copy started table=public.t"
        wait_until(lambda: d.proc.logs().count(copying) == 2, 60, "the copy again", d.proc)
        execute(d.url, "UPDATE t SET v = 'v2' WHERE id % 2 = 0", "DELETE FROM t WHERE id <= 100")
        wait_until(lambda: d.proc.logs().count(RETRYING) >= 4, 60, "the failures", d.proc)
        time.sleep(1)  # flushes of u after the copy is taken
    wait_lake_equals_source(d.settings, d.url, tables, d.proc, 60)
    assert d.proc.stop() == 0


def changed_at(url: str, statement: str) -> str:
    """Run `statement` in a transaction of its own; the WAL position just before its commit.

    The slot may be acknowledged up to there while streambed is idle (its heartbeats, WAL of
    other databases: a position read before the change is passed within seconds), but not
    to the commit, which only the flush that makes the change durable may acknowledge."""
    with psycopg.connect(url) as conn:
        conn.execute(statement)
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def confirmed_at_most(url: str, lsn: str) -> bool:
    """Whether the slot's confirmed position is at or before `lsn`."""
    confirmed = slot_confirmed(url)
    assert confirmed is not None
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT %s::pg_lsn <= %s::pg_lsn", (confirmed, lsn)).fetchone()
    assert row is not None
    return bool(row[0])


@pytest.mark.parametrize(
    ("local_bytes", "rows"),
    [
        ("0", 1_000_000),  # `big` (65 MiB) is copied by Spark's tasks
        # `big` (195 MiB) is copied by threads of streambed's process, in two ranges; three
        # times the rows so that its copy lasts seconds, as Spark's does, and the cut lands
        # while the ranges read and write
        (None, 3_000_000),
    ],
    ids=["spark", "here"],
)
def test_a_table_copy_and_the_stream_wait_out_a_storage_outage(
    proxied: tuple[Deployment, TcpProxy], local_bytes: str | None, rows: int
) -> None:
    """The store goes away while one table is being copied again (`streambed resync`) and
    another streams: the copy is made again and the flushes retried, in the same process."""
    d, proxy = proxied
    if local_bytes is not None:
        d.proc.env["STREAMBED_COPY_LOCAL_BYTES"] = local_bytes
    tables = small_and_big(d, rows)
    resync(d, "public.big")
    copying = "copy started table=public.big"
    wait_until(lambda: d.proc.logs().count(copying) == 2, 60, "the copy again", d.proc)
    proxy.cut()  # the copy's ranges are reading and writing now
    execute(
        d.url,
        "UPDATE small SET v = 'v2' WHERE id % 2 = 0",
        "DELETE FROM small WHERE id > 90",
        "UPDATE big SET pad = 'changed' WHERE id % 1000 = 0",
        "DELETE FROM big WHERE id <= 10",
    )
    wait_until(
        lambda: COPY_RETRY in d.proc.logs() and RETRYING in d.proc.logs(),
        180,
        "the copy and a flush to fail",
        d.proc,
    )
    proxy.restore()
    execute(d.url, "INSERT INTO small VALUES (1000, 'after')")
    wait_lake_equals_source(d.settings, d.url, tables, d.proc, 300)
    assert d.proc.running
    assert d.proc.stop() == 0


def small_and_big(d: Deployment, rows: int) -> list[str]:
    """Tables `small` (100 rows) and `big` (`rows`), copied by a first start: their names."""
    execute(
        d.url,
        "CREATE TABLE small (id int PRIMARY KEY, v text)",
        "INSERT INTO small SELECT g, 'v1' FROM generate_series(1, 100) g",
        "CREATE TABLE big (id int PRIMARY KEY, pad text)",
        f"INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, {rows}) g",
    )
    tables = ["public.small", "public.big"]
    start(d)
    wait_lake_equals_source(d.settings, d.url, tables, d.proc)
    return tables
