"""Frozen dataclasses for every pgoutput message of protocol versions 1 and 2.

Tuple values are the column's text form as `bytes`, `None` for NULL, `UNCHANGED` for an
unchanged TOAST value ('u'), or `Binary` when the publisher sent binary format ('b').
The `xid` of row and relation messages is set only inside a streamed transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


class _Unchanged:
    """Marker for an unchanged TOASTed value ('u'); compare with `is UNCHANGED`."""

    _instance: _Unchanged | None = None

    def __new__(cls) -> _Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"

    def __reduce__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()


@dataclass(frozen=True)
class Binary:
    """A value sent in binary format ('b'); streambed asks for text, so this is rare."""

    data: bytes


TupleValue = bytes | None | _Unchanged | Binary
TupleData = tuple[TupleValue, ...]

# Column flag bit: part of the replica identity key.
KEY_FLAG: Final = 1


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_ts: int  # microseconds since 2000-01-01 UTC
    xid: int


@dataclass(frozen=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True)
class RelationColumn:
    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        return bool(self.flags & KEY_FLAG)


@dataclass(frozen=True)
class Relation:
    relation_id: int
    namespace: str
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[RelationColumn, ...]
    xid: int | None = None


@dataclass(frozen=True)
class Type:
    type_oid: int
    namespace: str
    name: str
    xid: int | None = None


@dataclass(frozen=True)
class Insert:
    relation_id: int
    new: TupleData
    xid: int | None = None


@dataclass(frozen=True)
class Update:
    relation_id: int
    new: TupleData
    old: TupleData | None = None  # present when the key changed ('K') or identity is FULL ('O')
    old_is_key_only: bool = False  # True for 'K', False for 'O'
    xid: int | None = None


@dataclass(frozen=True)
class Delete:
    relation_id: int
    old: TupleData
    old_is_key_only: bool  # True for 'K', False for 'O' (REPLICA IDENTITY FULL)
    xid: int | None = None


TRUNCATE_CASCADE: Final = 1
TRUNCATE_RESTART_IDENTITY: Final = 2


@dataclass(frozen=True)
class Truncate:
    options: int
    relation_ids: tuple[int, ...]
    xid: int | None = None


@dataclass(frozen=True)
class LogicalMessage:
    flags: int  # 1 = transactional
    lsn: int
    prefix: str
    content: bytes
    xid: int | None = None

    @property
    def transactional(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True)
class StreamStart:
    xid: int
    first_segment: bool


@dataclass(frozen=True)
class StreamStop:
    pass


@dataclass(frozen=True)
class StreamCommit:
    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True)
class StreamAbort:
    xid: int
    subxid: int  # equal to xid when the whole transaction aborted


Message = (
    Begin
    | Commit
    | Origin
    | Relation
    | Type
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
)
