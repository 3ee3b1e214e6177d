"""pyiceberg's transaction, with its staged metadata computed once per change.

pyiceberg 0.12's `Transaction.table_metadata` applies every staged update to the table's
metadata and deep-copies the result, at each access. One of streambed's commits reads it
31 times (the snapshot producer's checks, its manifests, the summary, the requirements;
`tests/integration/lake/test_transaction.py` counts them), so a commit deep-copied the
whole metadata (every kept snapshot, the metadata log, every schema) that often, which
was most of a commit's time on a table keeping many snapshots (docs/benchmarks.md,
"Commit cost").

`LakeTransaction` computes it once for each pair of base metadata and staged updates, and
hands the same object out until either changes. Both are only ever replaced, never
changed in place: pyiceberg's models are frozen, a staged change makes a new tuple of
updates (`_stage`, `_rebuild_snapshot_updates`), and a refresh or commit gives the table a
new metadata object. So the object handed out is what a fresh computation would return,
except for `last_updated_ms`, which pyiceberg sets to the time of each computation when
updates are staged; the catalog's commit sets its own.
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableUpdate, update_table_metadata


class LakeTransaction(Transaction):
    """A `Transaction` whose `table_metadata` is computed once per state (module doc)."""

    def __init__(self, table: Table, autocommit: bool = False) -> None:
        super().__init__(table, autocommit)
        self._computed: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        computed = self._computed
        if computed is None or computed[0] is not base or computed[1] is not updates:
            computed = (base, updates, update_table_metadata(base, updates))
            self._computed = computed
        return computed[2]


def transaction(table: Table, autocommit: bool = False) -> LakeTransaction:
    """A transaction on `table` (as `table.transaction()`, see `LakeTransaction`);
    `autocommit`: each staged change is committed at once (as pyiceberg's maintenance
    operations use it)."""
    return LakeTransaction(table, autocommit)
