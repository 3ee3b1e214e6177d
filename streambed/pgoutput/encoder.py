"""Encode pgoutput messages to bytes: the inverse of `streambed.pgoutput.decoder.decode`.

Used by tests and test fixtures to build the bytes Postgres would send; not on the hot path,
so it favours being obviously correct. `encode(decode(b, in_stream=s), in_stream=s) == b`
for every valid `b`, and `decode(encode(m, in_stream=s), in_stream=s) == m` for every
message `m` that can be encoded.

A message that cannot be put on the wire raises `ValueError`: a string containing NUL, an
`xid` on a row or relation message outside a streamed block (or none inside one), an
Update with `old_is_key_only` but no old tuple, a number out of its field's range.
"""

from __future__ import annotations

import struct
from typing import assert_never

from streambed.pgoutput.messages import (
    UNCHANGED,
    Begin,
    Binary,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
)

__all__ = ["encode", "encode_tuple"]


def _pack(fmt: str, *values: object) -> bytes:
    try:
        return struct.pack("!" + fmt, *values)
    except struct.error as e:
        raise ValueError(f"cannot encode {values!r} as {fmt!r}: {e}") from e


def _string(value: str) -> bytes:
    raw = value.encode()
    if b"\0" in raw:
        raise ValueError(f"string {value!r} contains NUL and cannot be sent")
    return raw + b"\0"


def encode_tuple(values: TupleData) -> bytes:
    """TupleData: Int16 column count, then 'n', 'u', 't' + text or 'b' + binary per column."""
    parts = [_pack("h", len(values))]
    for value in values:
        if value is None:
            parts.append(b"n")
        elif value is UNCHANGED:
            parts.append(b"u")
        elif isinstance(value, Binary):
            parts.append(b"b" + _pack("i", len(value.data)) + value.data)
        elif isinstance(value, bytes):
            parts.append(b"t" + _pack("i", len(value)) + value)
        else:
            raise ValueError(f"not a tuple value: {value!r}")
    return b"".join(parts)


_StreamedMessage = Relation | Type | Insert | Update | Delete | Truncate | LogicalMessage


def _xid(message: _StreamedMessage, in_stream: bool) -> bytes:
    name = type(message).__name__
    if in_stream:
        if message.xid is None:
            raise ValueError(f"{name} inside a streamed block needs an xid")
        return _pack("I", message.xid)
    if message.xid is not None:
        raise ValueError(f"{name} outside a streamed block cannot carry an xid")
    return b""


def encode(message: Message, *, in_stream: bool) -> bytes:
    """The pgoutput bytes of `message`, starting at its type byte.

    `in_stream` is True for a message inside a streamed block; R, Y, I, U, D, T and M then
    carry their `xid`, which must be set (and must be None outside a block).
    """
    m = message
    if isinstance(m, Begin):
        return b"B" + _pack("QqI", m.final_lsn, m.commit_ts, m.xid)
    if isinstance(m, Commit):
        return b"C" + _pack("BQQq", m.flags, m.commit_lsn, m.end_lsn, m.commit_ts)
    if isinstance(m, Origin):
        return b"O" + _pack("Q", m.commit_lsn) + _string(m.name)
    if isinstance(m, Relation):
        if len(m.replica_identity) != 1 or m.replica_identity not in "dnfi":
            raise ValueError(f"unknown replica identity {m.replica_identity!r}")
        parts = [
            b"R",
            _xid(m, in_stream),
            _pack("I", m.relation_id),
            _string(m.namespace),
            _string(m.name),
            m.replica_identity.encode(),
            _pack("h", len(m.columns)),
        ]
        for column in m.columns:
            parts.append(_pack("B", column.flags))
            parts.append(_string(column.name))
            parts.append(_pack("Ii", column.type_oid, column.type_modifier))
        return b"".join(parts)
    if isinstance(m, Type):
        head = b"Y" + _xid(m, in_stream) + _pack("I", m.type_oid)
        return head + _string(m.namespace) + _string(m.name)
    if isinstance(m, Insert):
        return b"I" + _xid(m, in_stream) + _pack("I", m.relation_id) + b"N" + encode_tuple(m.new)
    if isinstance(m, Update):
        old = b""
        if m.old is not None:
            old = (b"K" if m.old_is_key_only else b"O") + encode_tuple(m.old)
        elif m.old_is_key_only:
            raise ValueError("Update with old_is_key_only needs an old tuple")
        head = b"U" + _xid(m, in_stream) + _pack("I", m.relation_id)
        return head + old + b"N" + encode_tuple(m.new)
    if isinstance(m, Delete):
        marker = b"K" if m.old_is_key_only else b"O"
        head = b"D" + _xid(m, in_stream) + _pack("I", m.relation_id)
        return head + marker + encode_tuple(m.old)
    if isinstance(m, Truncate):
        ids = _pack(f"{len(m.relation_ids)}I", *m.relation_ids)
        return b"T" + _xid(m, in_stream) + _pack("iB", len(m.relation_ids), m.options) + ids
    if isinstance(m, LogicalMessage):
        head = b"M" + _xid(m, in_stream) + _pack("BQ", m.flags, m.lsn) + _string(m.prefix)
        return head + _pack("i", len(m.content)) + m.content
    if isinstance(m, StreamStart):
        return b"S" + _pack("IB", m.xid, 1 if m.first_segment else 0)
    if isinstance(m, StreamStop):
        return b"E"
    if isinstance(m, StreamCommit):
        return b"c" + _pack("IBQQq", m.xid, m.flags, m.commit_lsn, m.end_lsn, m.commit_ts)
    if isinstance(m, StreamAbort):
        return b"A" + _pack("II", m.xid, m.subxid)
    assert_never(m)
