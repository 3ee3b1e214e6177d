"""What flows from the buffer to the lake: the collapsed changes of one table at one flush.

This module is the contract between `streambed.buffer` (which produces `TableDelta`s) and
`streambed.lake` / `streambed.lake.merge` (which apply them). It holds no logic beyond
small derived properties and `lake_key`, the one place a table's lake key is decided (the
stream's tables and the copy's alike), and imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streambed.core.errors import SchemaError
from streambed.pgoutput.messages import Relation, TupleValue


@dataclass(frozen=True)
class TableKey:
    """How rows of a table are identified.

    `columns` are indexes into `relation.columns`: the primary key when the source table
    has one, else the replica identity index. Empty means the table has no key: inserts
    are appended, and updates/deletes are only possible with REPLICA IDENTITY FULL, where
    `full_row` is True and a whole old row identifies the row to remove.
    """

    columns: tuple[int, ...]
    full_row: bool = False

    @property
    def append_only(self) -> bool:
        return not self.columns and not self.full_row


def lake_key(relation: Relation, primary_key: Callable[[], Sequence[str]]) -> TableKey:
    """How rows of `relation` are identified in the lake.

    With REPLICA IDENTITY DEFAULT or USING INDEX, the columns pgoutput flags as key; with
    FULL, the source table's primary key (`primary_key()`, its column names in index order,
    asked for only then) when there is one, else the whole row; otherwise the table is
    append-only (Postgres itself refuses UPDATE/DELETE on it while published). Raises
    SchemaError when a FULL table's primary key has columns that are not among the
    relation's (a publication's column list leaves them out).
    """
    if relation.replica_identity in ("d", "i"):
        return TableKey(tuple(i for i, c in enumerate(relation.columns) if c.is_key))
    if relation.replica_identity != "f":
        return TableKey(())
    key = tuple(primary_key())
    if not key:
        return TableKey((), full_row=True)
    names = [c.name for c in relation.columns]
    missing = [n for n in key if n not in names]
    if missing:
        raise SchemaError(
            f"{relation.namespace}.{relation.name}: primary key columns {missing} are "
            "not in the replicated columns; publish all key columns"
        )
    return TableKey(tuple(names.index(n) for n in key))


@dataclass(frozen=True)
class TableDelta:
    """The net effect of the committed changes of one table since its last flush.

    Values are in Postgres text form (`bytes`), `None` for NULL, or `UNCHANGED` for an
    unchanged TOAST value that must be taken from the row already in the lake.

    Applying a delta means: if `truncated`, drop every existing row; then remove every
    lake row whose key is in `removed_keys`; then add `rows`. A key appears in
    `removed_keys` only when its row may exist in the lake (the first change seen for it
    was an update or delete, or it came after a truncate-free flush boundary); a key first
    seen as an INSERT is known not to be in the lake, so a delta of inserts only has no
    `removed_keys` and needs no merge, only an append.
    """

    relation: Relation
    key: TableKey
    commit_lsn: int
    truncated: bool
    removed_keys: tuple[tuple[TupleValue, ...], ...]
    rows: tuple[tuple[TupleValue, ...], ...]
    moved: tuple[tuple[tuple[TupleValue, ...], tuple[TupleValue, ...]], ...] = ()
    """(new key, old key) pairs: the row now at `new key` has UNCHANGED values that must be
    taken from the lake row at `old key` (an UPDATE changed the key and left a TOAST value
    untouched). `old key` is always in `removed_keys`. Rows not listed here take UNCHANGED
    values from the lake row with their own key."""
    final: bool = True
    """False for a part of a large committed transaction: the lake must write it but not
    commit it; more parts follow, and the table's next final delta commits them all in one
    snapshot (see `streambed.buffer.ChangeBuffer`, "Large transactions")."""

    @property
    def schema_name(self) -> str:
        return self.relation.namespace

    @property
    def table_name(self) -> str:
        return self.relation.name

    @property
    def append_only(self) -> bool:
        return not self.truncated and not self.removed_keys

    @property
    def empty(self) -> bool:
        return not self.truncated and not self.removed_keys and not self.rows
