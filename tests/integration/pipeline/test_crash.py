"""SIGKILL at every failpoint, restart: the lake equals the source, nothing lost or doubled."""

from __future__ import annotations

import signal
import time

import pytest

from streambed.lake.catalog import open_catalog
from streambed.lake.deletes import current_files
from streambed.lake.sweep import sweep
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import (
    slot_confirmed,
    slot_exists,
    source_rows,
    wait_lake_equals_source,
    wait_until,
)
from tests.integration.pipeline.test_replication import SCHEMA, TABLES, execute

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "failpoint",
    [
        "after_parquet_write",
        "after_delete_files_write",
        "after_table_commit",
        "after_commit_before_state",
        "after_state_before_ack",
    ],
)
def test_crash_at_failpoint_then_restart(local_deployment: Deployment, failpoint: str) -> None:
    d = local_deployment
    execute(d.url, SCHEMA)
    # First a clean run that puts data in the lake, so later flushes must merge.
    d.proc.start()
    wait_until(lambda: slot_exists(d.url), 120, "the replication slot", d.proc)
    execute(
        d.url,
        "INSERT INTO ints SELECT g, 'v1', g, now() FROM generate_series(1, 3000) g",
        "INSERT INTO pairs SELECT g % 10, 'k' || g, 'v1' FROM generate_series(1, 500) g",
        "INSERT INTO shop.words SELECT 'w' || g, g, 'v1' FROM generate_series(1, 200) g",
    )
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    assert d.proc.stop() == 0
    acked_before = slot_confirmed(d.url)

    # Changes to all three tables in one transaction, and more after it.
    execute(
        d.url,
        "BEGIN; UPDATE ints SET name = 'v2' WHERE id % 2 = 0; "
        "DELETE FROM pairs WHERE a = 3; "
        "INSERT INTO shop.words VALUES ('new', -1, 'v2'); "
        "UPDATE shop.words SET word = word || '!' WHERE n < 10; COMMIT",
        "INSERT INTO ints SELECT g, 'v2', g, now() FROM generate_series(3001, 4000) g",
    )
    d.proc.start({"STREAMBED_FAILPOINTS": failpoint})
    code = d.proc.wait(timeout=300)
    assert code == -signal.SIGKILL, d.proc.logs()[-3000:]
    if failpoint != "after_state_before_ack":
        # Nothing the crashed run did was acknowledged to the source.
        assert slot_confirmed(d.url) == acked_before

    # More changes while it is down, then a restart without the failpoint.
    execute(d.url, "UPDATE ints SET amount = -amount WHERE id <= 100")
    d.proc.start()
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    assert d.proc.stop() == 0
    if failpoint == "after_delete_files_write":
        _delete_files_written_and_orphans_swept(d)


def _delete_files_written_and_orphans_swept(d: Deployment) -> None:
    """The flushes wrote position-delete files; the crashed run's are swept, the live ones
    kept, and the lake still reads equal to the source."""
    catalog = open_catalog(d.settings)
    tables = [catalog.load_table(tuple(name.split("."))) for name in TABLES]
    live = {p for table in tables for p in current_files(table).deletes}
    assert live, "the flushes after the first wrote no delete file"
    on_disk = {str(p) for p in d.settings.data_dir.rglob("*-deletes.parquet")}
    assert len(on_disk) > len(live)  # the crashed run's are orphans
    results = sweep(d.settings, older_than=0, now=time.time() + 3600)
    assert not [r for r in results if r.refused], results
    left = {str(p) for p in d.settings.data_dir.rglob("*-deletes.parquet")}
    assert {p.removeprefix("file://") for p in live} == left
    wait_lake_equals_source(d.settings, d.url, TABLES, None)
    for name, table in zip(TABLES, tables, strict=True):  # pyiceberg applies them too
        lake = [tuple(row.values()) for row in table.scan().to_arrow().to_pylist()]
        assert len(lake) == len(source_rows(d.url, name)) and len(set(lake)) == len(lake)
