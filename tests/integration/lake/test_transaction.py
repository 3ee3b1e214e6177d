"""`LakeTransaction` on a real catalog (local warehouse): its staged metadata is computed
once per state and is always what pyiceberg would compute; a commit computes it a few
times, not at each of pyiceberg's reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.table import Table
from pyiceberg.table import update as table_update
from pyiceberg.table.metadata import TableMetadata

from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from streambed.lake.commit import commit, frontier
from streambed.lake.expire import Retention, expire
from streambed.lake.tables import ensure_table
from streambed.lake.transaction import transaction
from tests.integration.lake.test_lake_tables import KEY, RELATION, _write

pytestmark = pytest.mark.integration


@pytest.fixture
def table(tmp_path: Path) -> Table:
    settings = Settings(source_url="postgresql://unused", data_dir=tmp_path)
    return ensure_table(open_catalog(settings), RELATION, KEY)


def _comparable(metadata: TableMetadata) -> TableMetadata:
    # pyiceberg stamps each computation with its time
    return metadata.model_copy(update={"last_updated_ms": 0})


def test_staged_metadata_follows_staged_changes_and_refreshes(table: Table) -> None:
    tx = transaction(table)
    first = tx.table_metadata
    assert tx.table_metadata is first  # nothing changed: not computed again
    assert "streambed.test" not in first.properties

    tx.set_properties({"streambed.test": "1"})
    staged = tx.table_metadata
    assert staged is not first
    assert staged.properties["streambed.test"] == "1"
    assert _comparable(staged) == _comparable(
        table.transaction().set_properties({"streambed.test": "1"}).table_metadata
    )

    # Another writer commits; a refresh gives the table new metadata, and the staged view
    # is computed again on top of it.
    other = table.catalog.load_table(table.name())
    commit(other, removed=[], added=_write(other, range(3)), lsn=7)
    table.refresh()
    rebased = tx.table_metadata
    assert rebased is not staged
    assert rebased.current_snapshot_id == other.metadata.current_snapshot_id
    assert rebased.properties["streambed.test"] == "1"

    tx.commit_transaction()
    assert table.properties["streambed.test"] == "1"
    assert frontier(table) == 7


def test_a_commit_and_its_expiry_compute_the_metadata_a_few_times(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    previous: list[str] = []
    for lsn in range(1, 21):  # a history for the copies to be worth counting
        files = _write(table, range(5))
        commit(table, removed=previous, added=files, lsn=lsn)
        previous = files

    computed = 0
    original = table_update.update_table_metadata

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal computed
        computed += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("streambed.lake.transaction.update_table_metadata", counting)
    monkeypatch.setattr("pyiceberg.table.update_table_metadata", counting)
    monkeypatch.setattr("pyiceberg.catalog.update_table_metadata", counting)

    files = _write(table, range(5))
    commit(table, removed=previous, added=files, lsn=21)
    committing = computed
    assert expire(table, Retention(hours=1, max_snapshots=5)) > 0
    expiring = computed - committing

    # pyiceberg's own transaction: 31 for the commit, 35 for the expiry (per expired id).
    assert committing <= 4, committing
    assert expiring <= 3, expiring
    assert frontier(table) == 21
    assert len(table.metadata.snapshots) <= 6
