"""The object store starts refusing streambed's key (an operator took its write right away)
while `streambed run` streams, or while it copies a table: the process stops with exit 3
and the fix, instead of retrying what no pause can fix, and acknowledges nothing that is
not in the lake; once the right is back, a restart makes the lake equal the source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streambed.lake.storage import WRITE_CHECK
from tests.fixtures.postgres import PgDatabase
from tests.fixtures.s3 import ALL_ACTIONS, ThrowawayS3
from tests.integration.copy.test_resync import _resync as resync
from tests.integration.pipeline.conftest import Deployment, deployment
from tests.integration.pipeline.harness import slot_exists, wait_lake_equals_source, wait_until
from tests.integration.pipeline.test_replication import SCHEMA, TABLES, execute, start
from tests.integration.pipeline.test_storage_outage import (
    changed_at,
    confirmed_at_most,
    small_and_big,
)

pytestmark = pytest.mark.integration

READ_ONLY = ("Read", "List")
REFUSED = "refused streambed's credentials or access"


@pytest.fixture
def own_store(pg_db: PgDatabase, tmp_path: Path) -> Iterator[tuple[Deployment, ThrowawayS3]]:
    """A deployment on an S3 server of its own: the test changes what its key may do."""
    with ThrowawayS3() as server:
        d = deployment(pg_db, tmp_path, server, server.new_bucket())
        try:
            yield d, server
        finally:
            d.proc.kill()


def test_a_key_that_may_not_write_stops_the_start(
    own_store: tuple[Deployment, ThrowawayS3],
) -> None:
    """A read-only key is found at start (`storage.check_writable`), before a slot pins WAL,
    not at the first write, which on a quiet source may come hours later."""
    d, server = own_store
    bucket = d.env["STREAMBED_S3_BUCKET"]
    execute(d.url, SCHEMA)
    server.allow(READ_ONLY, bucket)
    d.proc.start()
    assert d.proc.wait(120) == 3
    logs = d.proc.logs()
    assert "did not let streambed write and delete" in logs and "AccessDenied" in logs
    assert not slot_exists(d.url)

    server.allow(ALL_ACTIONS, bucket)
    start(d)
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    keys = [o["Key"] for o in server.client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert not [k for k in keys if k.endswith(WRITE_CHECK)]
    assert d.proc.stop() == 0


def test_streaming_stops_when_the_store_refuses_writes(
    own_store: tuple[Deployment, ThrowawayS3],
) -> None:
    d, server = own_store
    bucket = d.env["STREAMBED_S3_BUCKET"]
    execute(d.url, SCHEMA)
    execute(d.url, "INSERT INTO ints SELECT g, 'v1', g, now() FROM generate_series(1, 2000) g")
    start(d)
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)

    server.allow(READ_ONLY, bucket)
    before = changed_at(d.url, "UPDATE ints SET name = 'v2' WHERE id % 3 = 0")
    execute(
        d.url,
        "INSERT INTO shop.words SELECT 'w' || g, g, 'n' FROM generate_series(1, 100) g",
    )
    assert d.proc.wait(120) == 3
    logs = d.proc.logs()
    assert REFUSED in logs and "ACCESS_DENIED" in logs
    assert "STREAMBED_S3_ACCESS_KEY_ID" in logs
    assert "storage failed, retrying" not in logs
    assert confirmed_at_most(d.url, before)  # the changes are still in the slot

    server.allow(ALL_ACTIONS, bucket)
    start(d)
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    assert d.proc.stop() == 0


def test_a_copy_the_store_refuses_stops_the_process(
    own_store: tuple[Deployment, ThrowawayS3],
) -> None:
    """Nothing streams (no flush would fail): the copy's own failure stops the process."""
    d, server = own_store
    bucket = d.env["STREAMBED_S3_BUCKET"]
    d.proc.env["STREAMBED_COPY_LOCAL_BYTES"] = "0"  # `big` is copied by Spark's tasks
    tables = small_and_big(d, 200_000)

    server.allow(READ_ONLY, bucket)
    resync(d, "public.big")
    assert d.proc.wait(180) == 3
    logs = d.proc.logs()
    assert "copy failed: the lake's storage refused streambed; stopping" in logs
    assert REFUSED in logs and "copy failed in Spark or storage" not in logs

    server.allow(ALL_ACTIONS, bucket)
    execute(d.url, "UPDATE big SET pad = 'after' WHERE id % 100 = 0")
    start(d)  # the table is still pending: copied again at start
    wait_until(lambda: "copy committed table=public.big" in d.proc.logs(), 180, "the copy", d.proc)
    wait_lake_equals_source(d.settings, d.url, tables, d.proc)
    assert d.proc.stop() == 0
