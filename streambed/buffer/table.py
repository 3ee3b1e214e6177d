"""The committed changes of one table, collapsed to what the lake needs to apply.

Three shapes, chosen by the table's `TableKey`:

- `KeyedTable`: one final state per key (a row, or deleted) plus whether the key may
  already exist in the lake. Insert/update/delete of the same key collapse.
- `FullRowTable`: REPLICA IDENTITY FULL without a key. The whole old row identifies a row,
  so rows are a multiset; removing a row that is not buffered removes it from the lake.
- `AppendTable`: no key at all. Inserts append; an update or delete is a `SchemaError`.

Staged operations are the insert's new tuple itself (a plain `tuple`, the hot path) or the
`Update` / `Delete` / `Truncate` message. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from operator import itemgetter
from typing import Any, Final

from streambed.buffer.changes import TableDelta, TableKey
from streambed.core.errors import Kind, SchemaError, StreambedError
from streambed.pgoutput.messages import (
    UNCHANGED,
    Binary,
    Delete,
    Relation,
    Truncate,
    TupleData,
    TupleValue,
    Update,
)

Op = TupleData | Update | Delete | Truncate
"""One staged change: an inserted row (the tuple itself), or an update/delete/truncate."""

# What a buffered row costs in CPython 3.11 (64-bit), measured with tracemalloc: the
# tuple (GC header + object header + length: 40) plus the slot that holds it (a keyed
# table's dict entry, ~56 with growth; a list slot is 8), and per value an 8-byte
# reference plus a bytes object (33-byte header, rounded up to 8: ~37 on average) around
# its data. A NULL is a shared singleton and costs only the reference, but it is counted
# like an empty value: counting NULLs costs the hot path more than the overcount is worth,
# and an estimate that errs high keeps memory bounds bounds.
ROW_OVERHEAD: Final = 96
VALUE_OVERHEAD: Final = 8 + 37
TOMBSTONE_BYTES: Final = ROW_OVERHEAD

_ABSENT: Final = object()


def row_bytes(row: TupleData) -> int:
    """Approximate memory of a row: value sizes plus per-row and per-value overhead."""
    base = ROW_OVERHEAD + VALUE_OVERHEAD * len(row)
    try:
        # Fast path: only bytes and None (filter drops None and b"").
        return base + sum(map(len, filter(None, row)))  # type: ignore[arg-type]
    except TypeError:
        return base + sum(_value_bytes(v) for v in row)


def rows_bytes(rows: list[TupleData]) -> int:
    """`sum(map(row_bytes, rows))`, counted in bulk."""
    base = ROW_OVERHEAD * len(rows) + VALUE_OVERHEAD * sum(map(len, rows))
    try:
        return base + sum(map(len, filter(None, chain.from_iterable(rows))))  # type: ignore[arg-type]
    except TypeError:
        return sum(map(row_bytes, rows))


def only_rows(ops: Iterable[Op]) -> bool:
    """True when `ops` is a list of inserted rows only (no update, delete or truncate)."""
    return type(ops) is list and set(map(type, ops)) <= {tuple}


def _value_bytes(value: TupleValue) -> int:
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, Binary):
        return len(value.data)
    return 0


def _fill(new: TupleData, base: TupleData) -> TupleData:
    """`new` with each UNCHANGED value taken from `base` (which may be UNCHANGED too)."""
    return tuple(b if v is UNCHANGED else v for v, b in zip(new, base, strict=True))


def qualified(relation: Relation) -> str:
    return f"{relation.namespace}.{relation.name}"


def make_table(relation: Relation, key: TableKey) -> TableBuffer:
    """The buffer shape for a table's key; checks the key fits the relation."""
    width = len(relation.columns)
    bad = [i for i in key.columns if not 0 <= i < width]
    if bad:
        raise StreambedError(
            f"key columns {bad} of {qualified(relation)} are outside its {width} columns",
            kind=Kind.INTERNAL,
        )
    if key.columns:
        return KeyedTable(relation, key)
    if key.full_row:
        return FullRowTable(relation, key)
    return AppendTable(relation, key)


class TableBuffer:
    """Common state of every table shape. `bytes` and the entry count drive the flush
    triggers; `apply` reports how they changed."""

    __slots__ = ("bytes", "key", "parted", "relation", "truncated")

    def __init__(self, relation: Relation, key: TableKey) -> None:
        self.relation = relation
        self.key = key
        self.truncated = False
        self.bytes = 0
        self.parted = False  # parts of a large transaction were handed over since the last drain

    @property
    def entries(self) -> int:
        """Buffered entries (rows and deletions), what `apply` counts."""
        raise NotImplementedError

    def apply(self, ops: Iterable[Op]) -> tuple[int, int]:
        """Apply one committed transaction's changes to this table, in order; returns the
        change in (`entries`, `bytes`)."""
        raise NotImplementedError

    def drain(self, commit_lsn: int, final: bool = True) -> TableDelta | None:
        """The delta of everything applied since the last drain (None if it is a no-op and
        no part was handed over); the buffer is empty afterwards. `final=False` hands over
        a part of a large transaction (`TableDelta.final`)."""
        raise NotImplementedError

    def _delta(
        self,
        commit_lsn: int,
        removed_keys: tuple[tuple[TupleValue, ...], ...],
        rows: tuple[TupleData, ...],
        final: bool,
        moved: tuple[tuple[tuple[TupleValue, ...], tuple[TupleValue, ...]], ...] = (),
    ) -> TableDelta | None:
        truncated = self.truncated
        self.truncated = False
        self.bytes = 0
        parted = self.parted
        self.parted = not final
        if not truncated and not removed_keys and not rows and not (final and parted):
            return None
        return TableDelta(
            relation=self.relation,
            key=self.key,
            commit_lsn=commit_lsn,
            truncated=truncated,
            removed_keys=removed_keys,
            rows=rows,
            moved=moved,
            final=final,
        )

    def _no_value(self, what: str) -> StreambedError:
        return StreambedError(
            f"{what} on {qualified(self.relation)} has no value for a key column "
            f"(key columns {list(self.key.columns)}): the table key does not match the replica "
            "identity the source sends; this is a bug in how streambed chose the key",
            kind=Kind.PROTOCOL,
        )


class KeyedTable(TableBuffer):
    """Collapse per key. `rows[key]` is the final row or None (deleted); `may_exist` holds
    the keys whose first change since the last drain was an update or delete."""

    __slots__ = ("_key_of", "_single", "may_exist", "moved", "rows")

    def __init__(self, relation: Relation, key: TableKey) -> None:
        super().__init__(relation, key)
        # itemgetter of one index returns the value itself: a cheaper dict key than a tuple.
        self._key_of: Any = itemgetter(*key.columns)
        self._single = len(key.columns) == 1
        self.rows: dict[Any, TupleData | None] = {}
        self.may_exist: set[Any] = set()
        # new key -> old key whose lake row holds the new row's UNCHANGED values
        self.moved: dict[Any, Any] = {}

    @property
    def entries(self) -> int:
        return len(self.rows)

    def apply(self, ops: Iterable[Op]) -> tuple[int, int]:
        rows = self.rows
        key_of = self._key_of
        entries = len(rows)
        if only_rows(ops):
            # The common case, a transaction of inserts: the same as the loop below, in bulk.
            inserted: list[TupleData] = ops  # type: ignore[assignment]
            keys = list(map(key_of, inserted))
            rows.update(zip(keys, inserted, strict=True))
            if self.moved:
                for key in keys:
                    self.moved.pop(key, None)
            added = rows_bytes(inserted)
            self.bytes += added
            return len(rows) - entries, added
        start = self.bytes
        added = 0
        for op in ops:
            if type(op) is tuple:
                # INSERT: the key cannot be in the lake unless a buffered delete put it in
                # may_exist, which stays as it is.
                key = key_of(op)
                rows[key] = op
                added += row_bytes(op)
                if self.moved:
                    self.moved.pop(key, None)
            elif isinstance(op, Update):
                added += self._update(op)
            elif isinstance(op, Delete):
                added += self._remove(self._key(op.old, "delete"))[1]
            else:
                rows.clear()
                self.may_exist.clear()
                self.moved.clear()
                self.truncated = True
                self.bytes = 0
                added = 0
        self.bytes += added
        return len(rows) - entries, self.bytes - start

    def drain(self, commit_lsn: int, final: bool = True) -> TableDelta | None:
        rows = tuple(row for row in self.rows.values() if row is not None)
        removed: tuple[tuple[TupleValue, ...], ...]
        if self.truncated:
            removed = ()  # the lake table is emptied first: nothing left to remove
        elif self._single:
            removed = tuple((key,) for key in self.may_exist)
        else:
            removed = tuple(self.may_exist)
        moved: list[tuple[tuple[TupleValue, ...], tuple[TupleValue, ...]]] = []
        for new_key, old_key in self.moved.items():
            row = self.rows.get(new_key)
            if row is not None and UNCHANGED in row:
                moved.append(((new_key,), (old_key,)) if self._single else (new_key, old_key))
        self.rows = {}
        self.may_exist = set()
        self.moved = {}
        return self._delta(commit_lsn, removed, rows, final, tuple(moved))

    def _key(self, row: TupleData, what: str) -> Any:
        key = self._key_of(row)
        if key is None or (not self._single and None in key):
            raise self._no_value(what)
        return key

    def _update(self, msg: Update) -> int:
        new = msg.new
        old = msg.old
        key = self._key_of(new)
        if old is None:
            return self._upsert(key, new, None)
        old_key = self._key(old, "update")
        base = None if msg.old_is_key_only else old
        if old_key == key:
            return self._upsert(key, new, base)
        # The key changed: the old key is deleted, the new key upserted. UNCHANGED values
        # come from the old row: the full old tuple, else the buffered row of the old key,
        # else (still UNCHANGED) the lake row of the old key, recorded in `moved`.
        previous, removed_bytes = self._remove(old_key)
        origin = self.moved.pop(old_key, old_key)
        size = removed_bytes + self._upsert(key, new, base if base is not None else previous)
        if UNCHANGED in self.rows[key]:  # type: ignore[operator]
            self.moved[key] = origin
        else:
            self.moved.pop(key, None)
        return size

    def _upsert(self, key: Any, new: TupleData, base: TupleData | None) -> int:
        rows = self.rows
        previous = rows.get(key, _ABSENT)
        if previous is _ABSENT:
            self.may_exist.add(key)
            freed = 0
        elif previous is None:
            freed = TOMBSTONE_BYTES
        else:
            freed = row_bytes(previous)  # type: ignore[arg-type]
            if base is None:
                base = previous  # type: ignore[assignment]
        if base is not None and UNCHANGED in new:
            new = _fill(new, base)
        rows[key] = new
        return row_bytes(new) - freed

    def _remove(self, key: Any) -> tuple[TupleData | None, int]:
        """Mark `key` deleted; the row it had in the buffer, and the change in bytes."""
        rows = self.rows
        previous = rows.get(key, _ABSENT)
        rows[key] = None
        if previous is _ABSENT:
            self.may_exist.add(key)
            return None, TOMBSTONE_BYTES
        if previous is None:
            return None, 0
        return previous, TOMBSTONE_BYTES - row_bytes(previous)  # type: ignore[return-value, arg-type]


class FullRowTable(TableBuffer):
    """REPLICA IDENTITY FULL without a key: rows form a multiset. `removed` lists lake rows
    to remove, one entry per removed copy."""

    __slots__ = ("_entries", "counts", "removed")

    def __init__(self, relation: Relation, key: TableKey) -> None:
        super().__init__(relation, key)
        self.counts: dict[TupleData, int] = {}
        self.removed: list[TupleData] = []
        self._entries = 0

    def apply(self, ops: Iterable[Op]) -> tuple[int, int]:
        entries, start = self._entries, self.bytes
        for op in ops:
            if type(op) is tuple:
                self._add(op)
            elif isinstance(op, Update):
                if op.old is None or op.old_is_key_only:
                    raise self._no_value("update")
                self._take(op.old)
                self._add(_fill(op.new, op.old) if UNCHANGED in op.new else op.new)
            elif isinstance(op, Delete):
                if op.old_is_key_only:
                    raise self._no_value("delete")
                self._take(op.old)
            else:
                self.counts.clear()
                self.removed.clear()
                self.truncated = True
                self.bytes = 0
                self._entries = 0
        return self._entries - entries, self.bytes - start

    @property
    def entries(self) -> int:
        return self._entries

    def drain(self, commit_lsn: int, final: bool = True) -> TableDelta | None:
        rows = tuple(row for row, count in self.counts.items() for _ in range(count))
        removed = () if self.truncated else tuple(self.removed)
        self.counts = {}
        self.removed = []
        self._entries = 0
        return self._delta(commit_lsn, removed, rows, final)

    def _add(self, row: TupleData) -> None:
        self.counts[row] = self.counts.get(row, 0) + 1
        self._entries += 1
        self.bytes += row_bytes(row)

    def _take(self, row: TupleData) -> None:
        count = self.counts.get(row, 0)
        if count == 0:
            # Not buffered, so it is in the lake (unless truncated, when the lake is emptied).
            if not self.truncated:
                self.removed.append(row)
                self._entries += 1
                self.bytes += row_bytes(row)
            return
        if count == 1:
            del self.counts[row]
        else:
            self.counts[row] = count - 1
        self._entries -= 1
        self.bytes -= row_bytes(row)


class AppendTable(TableBuffer):
    """No key and no full replica identity: inserts are appended, duplicates allowed."""

    __slots__ = ("rows",)

    def __init__(self, relation: Relation, key: TableKey) -> None:
        super().__init__(relation, key)
        self.rows: list[TupleData] = []

    def apply(self, ops: Iterable[Op]) -> tuple[int, int]:
        rows = self.rows
        entries, start = len(rows), self.bytes
        if only_rows(ops):
            inserted: list[TupleData] = ops  # type: ignore[assignment]
            rows.extend(inserted)
            added = rows_bytes(inserted)
            self.bytes += added
            return len(inserted), added
        added = 0
        for op in ops:
            if type(op) is tuple:
                rows.append(op)
                added += row_bytes(op)
            elif isinstance(op, Update | Delete):
                name = qualified(self.relation)
                what = "an UPDATE" if isinstance(op, Update) else "a DELETE"
                raise SchemaError(
                    f"{name} has {what} but no primary key or replica identity, so streambed "
                    f"cannot tell which row changed: add a primary key to {name}, or run "
                    f"`ALTER TABLE {name} REPLICA IDENTITY FULL`, then resync the table"
                )
            else:
                rows.clear()
                self.truncated = True
                self.bytes = 0
                added = 0
        self.bytes += added
        return len(rows) - entries, self.bytes - start

    @property
    def entries(self) -> int:
        return len(self.rows)

    def drain(self, commit_lsn: int, final: bool = True) -> TableDelta | None:
        rows = tuple(self.rows)
        self.rows = []
        return self._delta(commit_lsn, (), rows, final)
