"""`streambed run` keeps a table's snapshots and manifests bounded while it streams."""

from __future__ import annotations

import pytest

from streambed.lake.catalog import open_catalog
from streambed.lake.tables import METADATA_PROPERTIES
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import slot_exists, wait_lake_equals_source, wait_until
from tests.integration.pipeline.test_replication import execute

pytestmark = pytest.mark.integration


def test_streaming_expires_old_snapshots_and_drops_dead_manifests(
    local_deployment: Deployment,
) -> None:
    d = local_deployment
    execute(d.url, "CREATE TABLE ints (id int PRIMARY KEY, name text)")
    d.proc.start({"STREAMBED_SNAPSHOT_MAX": "3"})
    wait_until(lambda: slot_exists(d.url), 120, "the replication slot", d.proc)
    execute(d.url, "INSERT INTO ints SELECT g, 'x' FROM generate_series(1, 1000) g")
    wait_lake_equals_source(d.settings, d.url, ["public.ints"], d.proc)
    # each round its own commit: updates rewrite files (a Spark merge), an insert appends
    rounds = 8
    for i in range(rounds):
        execute(
            d.url,
            f"UPDATE ints SET name = 'round {i}' WHERE id % {rounds} = {i}",
            f"INSERT INTO ints VALUES ({2000 + i}, 'new')",
        )
        wait_lake_equals_source(d.settings, d.url, ["public.ints"], d.proc)
    assert d.proc.stop() == 0

    table = open_catalog(d.settings).load_table(("public", "ints"))
    for key, value in METADATA_PROPERTIES.items():  # only its last metadata files are kept
        assert table.properties[key] == value
    summaries = [s.summary for s in table.metadata.snapshots]
    assert 1 <= len(summaries) <= 3  # 1 copy + 1 insert + >= 8 round commits were made
    current = table.current_snapshot()
    assert current is not None
    # every manifest the current snapshot lists has a live file, except its own record
    # of the files it removed
    for manifest in current.manifests(table.io):
        live = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        assert live or manifest.added_snapshot_id == current.snapshot_id, manifest
