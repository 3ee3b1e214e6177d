"""Message builders and a model of the lake for the buffer tests."""

from __future__ import annotations

from collections.abc import Iterable

from streambed.buffer import ChangeBuffer
from streambed.buffer.changes import TableDelta, TableKey
from streambed.pgoutput.messages import (
    KEY_FLAG,
    UNCHANGED,
    Delete,
    Insert,
    Message,
    Relation,
    RelationColumn,
    Truncate,
    TupleData,
    Update,
)

REL_ID = 16384
OTHER_ID = 16385

COLUMNS = (
    RelationColumn(KEY_FLAG, "id", 25, -1),
    RelationColumn(0, "v", 25, -1),
    RelationColumn(0, "big", 25, -1),
)
REL = Relation(REL_ID, "public", "t", "d", COLUMNS)
OTHER = Relation(OTHER_ID, "public", "other", "d", COLUMNS)
KEY = TableKey((0,))

Row = tuple[bytes, bytes, bytes]
Lake = dict[bytes, TupleData]


def ins(k: bytes, v: bytes = b"v", big: bytes = b"B", rel: int = REL_ID) -> Insert:
    return Insert(rel, (k, v, big))


def upd(
    k: bytes,
    v: bytes = b"v2",
    big: object = UNCHANGED,
    old_key: bytes | None = None,
    rel: int = REL_ID,
) -> Update:
    old = None if old_key is None else (old_key, None, None)
    return Update(rel, (k, v, big), old=old, old_is_key_only=old is not None)  # type: ignore[arg-type]


def dele(k: bytes, rel: int = REL_ID) -> Delete:
    return Delete(rel, (k, None, None), old_is_key_only=True)


def trunc(*rels: int) -> Truncate:
    return Truncate(0, rels or (REL_ID,))


def feed(buf: ChangeBuffer, msg: Message) -> None:
    if isinstance(msg, Insert):
        buf.insert(msg)
    elif isinstance(msg, Update):
        buf.update(msg)
    elif isinstance(msg, Delete):
        buf.delete(msg)
    elif isinstance(msg, Truncate):
        buf.truncate(msg)
    else:
        raise AssertionError(msg)


def new_buffer(tmp: object, memory: int = 1 << 30, frontier: int | None = None) -> ChangeBuffer:
    from pathlib import Path

    assert isinstance(tmp, Path)
    buf = ChangeBuffer(tmp / "spill", memory, lambda schema, table: frontier)
    buf.relation(REL, KEY)
    buf.relation(OTHER, KEY)
    return buf


def run_txns(buf: ChangeBuffer, txns: Iterable[Iterable[Message]], lsn: int = 100) -> int:
    """Each inner list is one committed, non-streamed transaction; returns the last LSN."""
    for xid, txn in enumerate(txns, start=500):
        buf.begin(xid)
        for msg in txn:
            feed(buf, msg)
        lsn += 10
        buf.commit(lsn, lsn + 1)
    return lsn


def apply_delta(lake: Lake, delta: TableDelta) -> None:
    """Apply a delta the way the contract says, filling UNCHANGED from the removed row."""
    if delta.truncated:
        lake.clear()
    old = {}
    for key in delta.removed_keys:
        assert len(key) == 1
        k = key[0]
        assert isinstance(k, bytes)
        if k in lake:
            old[k] = lake.pop(k)
    for row in delta.rows:
        k = row[0]
        assert isinstance(k, bytes)
        assert k not in lake, f"row {row} would duplicate key {k!r} in the lake"
        if UNCHANGED in row:
            base = old[k]  # KeyError: the merge would have nothing to fill from
            row = tuple(b if v is UNCHANGED else v for v, b in zip(row, base, strict=True))
        lake[k] = row
