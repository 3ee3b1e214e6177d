"""Decode pgoutput messages (protocol versions 1 and 2) from bytes. Pure: no I/O.

`decode(payload, in_stream=...)` turns one message (the payload of an XLogData 'w' message,
starting at the type byte) into one of the dataclasses of `streambed.pgoutput.messages`.
Inside a streamed block (between Stream Start and Stream Stop) the messages R, Y, I, U, D,
T and M carry the xid of the streamed transaction after the type byte; the caller says
whether the payload came from inside such a block. `Decoder` keeps track of that itself.

Every read is length-checked. Malformed input of any kind (truncated, unknown message or
tuple kind, a string without its NUL, a name that is not UTF-8, a negative length or count,
bytes left over after the message) raises `DecodeError`, which names the message kind and
the byte offset where decoding failed (0 <= offset <= len(payload)). Nothing else is raised.

This is the hot path of the product: the code below favours precompiled `struct.Struct`
objects, local names and few calls over elegance.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from itertools import repeat

from streambed.core.errors import DecodeError
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
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    TupleValue,
    Type,
    Update,
)

__all__ = ["Decoder", "decode"]

# Network byte order everywhere. LSNs, xids and OIDs are unsigned; timestamps, type
# modifiers, lengths and counts are signed, and a negative length or count is an error
# (tuple value lengths are read unsigned: a negative one then runs past the end).
_BEGIN = struct.Struct("!QqI")  # final_lsn, commit_ts, xid
_COMMIT = struct.Struct("!BQQq")  # flags, commit_lsn, end_lsn, commit_ts
_STREAM_COMMIT = struct.Struct("!IBQQq")  # xid, flags, commit_lsn, end_lsn, commit_ts
_STREAM_START = struct.Struct("!IB")  # xid, first_segment
_STREAM_ABORT = struct.Struct("!II")  # xid, subxid
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")
_I32 = struct.Struct("!i")
_I16 = struct.Struct("!h")
_VALUE_HEAD = struct.Struct("!BI")  # tuple value kind, length (meaningful for 't' and 'b')
_INSERT_HEAD = struct.Struct("!IBh")  # relation_id, 'N', column count
_STREAMED_INSERT_HEAD = struct.Struct("!IIBh")  # xid, relation_id, 'N', column count
_PAD = bytes(_VALUE_HEAD.size)
_REL_KIND = struct.Struct("!IB")  # relation_id, tuple kind byte
_XID_REL_KIND = struct.Struct("!IIB")  # xid, relation_id, tuple kind byte
_COLUMN_TAIL = struct.Struct("!Ii")  # type_oid, type_modifier
_TRUNCATE_HEAD = struct.Struct("!iB")  # relation count, options
_MESSAGE_HEAD = struct.Struct("!BQ")  # flags, lsn

_STRUCT_ERRORS = (struct.error, IndexError)

# Byte values of the tuple kinds and tuple markers.
_T_TEXT = 0x74  # 't'
_T_NULL = 0x6E  # 'n'
_T_UNCHANGED = 0x75  # 'u'
_T_BINARY = 0x62  # 'b'
_NEW = 0x4E  # 'N'
_KEY = 0x4B  # 'K'
_OLD = 0x4F  # 'O'
_OLD_TUPLE_MARKERS = frozenset((_KEY, _OLD))

_REPLICA_IDENTITIES = frozenset(b"dnfi")

# Insert, Update and Delete are built without their frozen-dataclass __init__, which sets
# each field through object.__setattr__: about a quarter of the time to decode an Insert.
# The decoder fills the new instance's __dict__ directly instead, in half that time. The
# check below stops the import if one of these classes ever gains a field or slots, so that
# cannot go unnoticed.
_new_object = object.__new__
_FAST_BUILT_FIELDS: dict[type, tuple[str, ...]] = {
    Insert: ("relation_id", "new", "xid"),
    Update: ("relation_id", "new", "old", "old_is_key_only", "xid"),
    Delete: ("relation_id", "old", "old_is_key_only", "xid"),
}


def _check_fast_built_classes() -> None:
    for cls, names in _FAST_BUILT_FIELDS.items():
        if tuple(f.name for f in fields(cls)) != names or "__slots__" in vars(cls):
            raise ImportError(f"{cls.__name__} changed: update how decoder.py builds it")


_check_fast_built_classes()


def _truncated(kind: str, offset: int, what: str) -> DecodeError:
    return DecodeError(kind, offset, f"message ends inside {what}")


def _check_end(data: bytes, pos: int, kind: str) -> None:
    if pos != len(data):
        raise DecodeError(kind, pos, f"{len(data) - pos} unexpected bytes after the message")


def _read_string(data: bytes, pos: int, kind: str, what: str) -> tuple[str, int]:
    """A NUL-terminated UTF-8 string at `pos`; returns it and the offset after the NUL."""
    end = data.find(0, pos)
    if end < 0:
        raise DecodeError(kind, pos, f"{what} is not NUL-terminated")
    try:
        return data[pos:end].decode(), end + 1
    except UnicodeDecodeError as e:
        raise DecodeError(kind, pos + e.start, f"{what} is not valid UTF-8") from e


def _read_tuple(padded: bytes, pos: int, size: int, kind: str) -> tuple[TupleData, int]:
    """TupleData at `pos`: Int16 column count, then one value per column.

    `padded` is the message followed by `_PAD` and `size` the length of the message alone.
    Returns the values and the offset after them.
    """
    if pos + 2 > size:
        raise _truncated(kind, pos, "the column count")
    (count,) = _I16.unpack_from(padded, pos)
    if count < 0:
        raise DecodeError(kind, pos, f"negative column count {count}")
    return _read_values(padded, pos + 2, size, count, kind)


def _read_values(
    padded: bytes, pos: int, size: int, count: int, kind: str
) -> tuple[TupleData, int]:
    """`count` tuple values at `pos` of `padded`, the message followed by `_PAD`.

    The padding lets one unpack read a value's kind and length together even when the last
    value is a one-byte 'n' or 'u'; `size` is the length of the message without it. A length
    is read unsigned, so a negative one shows up as running past the end.
    """
    values: list[TupleValue] = []
    append = values.append
    unpack = _VALUE_HEAD.unpack_from
    for _ in repeat(None, count):
        marker, length = unpack(padded, pos)
        if marker == _T_TEXT:
            end = pos + 5 + length
            if end > size:
                raise _bad_length(kind, pos, size, length, "text")
            append(padded[pos + 5 : end])
            pos = end
        elif marker == _T_NULL:
            append(None)
            pos += 1
        elif marker == _T_UNCHANGED:
            append(UNCHANGED)
            pos += 1
        elif marker == _T_BINARY:
            end = pos + 5 + length
            if end > size:
                raise _bad_length(kind, pos, size, length, "binary")
            append(Binary(padded[pos + 5 : end]))
            pos = end
        elif pos >= size:
            raise _truncated(kind, size, "tuple data")
        else:
            raise DecodeError(kind, pos, f"unknown tuple value kind {marker:#04x}")
    return tuple(values), pos


# Tuples of text and NULL values only (nearly every row) are read by a function made for
# their column count: one straight run of unpacks and slices per column, no loop, no list.
# It accepts a subset of what `_read_values` accepts and gives the same result for it; on
# anything else ('u', 'b', a bad kind, a length past the end) it returns None and the
# caller reads the tuple again with `_read_values`, which handles or reports it.
_FAST_MAX_COLUMNS = 64
_FastReader = Callable[[bytes, int, int], "tuple[TupleData, int] | None"]
_fast_readers: dict[int, _FastReader] = {}

_FAST_COLUMN = """\
    marker, length = unpack(padded, pos)
    if marker == 0x74:
        end = pos + 5 + length
        if end > size:
            return None
        v{i} = padded[pos + 5 : end]
        pos = end
    elif marker == 0x6E:
        v{i} = None
        pos += 1
    else:
        return None
"""


def _fast_reader(count: int) -> _FastReader | None:
    """The reader of text/NULL tuples of `count` columns (None above `_FAST_MAX_COLUMNS`)."""
    reader = _fast_readers.get(count)
    if reader is None and 0 < count <= _FAST_MAX_COLUMNS:
        body = "".join(_FAST_COLUMN.format(i=i) for i in range(count))
        values = "".join(f"v{i}, " for i in range(count))
        source = f"def read(padded, pos, size, unpack=unpack):\n{body}    return ({values}), pos\n"
        namespace: dict[str, object] = {"unpack": _VALUE_HEAD.unpack_from}
        exec(source, namespace)  # generated from the constant above only
        reader = _fast_readers[count] = namespace["read"]  # type: ignore[assignment]
    return reader


def _bad_length(kind: str, pos: int, size: int, length: int, what: str) -> DecodeError:
    if pos + 5 > size:
        return _truncated(kind, pos, f"the length of a {what} value")
    if length >= 0x80000000:
        return DecodeError(kind, pos, f"negative {what} value length {length - 0x100000000}")
    return DecodeError(kind, pos, f"{what} value of {length} bytes runs past the end")


def _begin(data: bytes, in_stream: bool) -> Begin:
    try:
        final_lsn, commit_ts, xid = _BEGIN.unpack_from(data, 1)
    except struct.error:
        raise _truncated("Begin", 1, "the Begin fields") from None
    _check_end(data, 21, "Begin")
    return Begin(final_lsn, commit_ts, xid)


def _commit(data: bytes, in_stream: bool) -> Commit:
    try:
        flags, commit_lsn, end_lsn, commit_ts = _COMMIT.unpack_from(data, 1)
    except struct.error:
        raise _truncated("Commit", 1, "the Commit fields") from None
    _check_end(data, 26, "Commit")
    return Commit(flags, commit_lsn, end_lsn, commit_ts)


def _origin(data: bytes, in_stream: bool) -> Origin:
    try:
        (commit_lsn,) = _U64.unpack_from(data, 1)
    except struct.error:
        raise _truncated("Origin", 1, "the commit LSN") from None
    name, pos = _read_string(data, 9, "Origin", "the origin name")
    _check_end(data, pos, "Origin")
    return Origin(commit_lsn, name)


def _read_xid(data: bytes, kind: str) -> int:
    try:
        xid: int = _U32.unpack_from(data, 1)[0]
    except struct.error:
        raise _truncated(kind, 1, "the xid of a streamed message") from None
    return xid


def _relation(data: bytes, in_stream: bool) -> Relation:
    kind = "Relation"
    xid = _read_xid(data, kind) if in_stream else None
    pos = 5 if in_stream else 1
    try:
        (relation_id,) = _U32.unpack_from(data, pos)
    except struct.error:
        raise _truncated(kind, pos, "the relation id") from None
    namespace, pos = _read_string(data, pos + 4, kind, "the namespace")
    name, pos = _read_string(data, pos, kind, "the relation name")
    try:
        identity = data[pos]
        if identity not in _REPLICA_IDENTITIES:
            raise DecodeError(kind, pos, f"unknown replica identity {identity:#04x}")
        pos += 1
        (count,) = _I16.unpack_from(data, pos)
    except _STRUCT_ERRORS:
        raise _truncated(kind, pos, "the replica identity and column count") from None
    if count < 0:
        raise DecodeError(kind, pos, f"negative column count {count}")
    pos += 2
    columns = []
    for _ in range(count):
        try:
            flags = data[pos]
        except IndexError:
            raise _truncated(kind, pos, "a column") from None
        column_name, pos = _read_string(data, pos + 1, kind, "a column name")
        try:
            type_oid, type_modifier = _COLUMN_TAIL.unpack_from(data, pos)
        except struct.error:
            raise _truncated(kind, pos, "a column type") from None
        pos += 8
        columns.append(RelationColumn(flags, column_name, type_oid, type_modifier))
    _check_end(data, pos, kind)
    return Relation(relation_id, namespace, name, chr(identity), tuple(columns), xid)


def _type(data: bytes, in_stream: bool) -> Type:
    kind = "Type"
    xid = _read_xid(data, kind) if in_stream else None
    pos = 5 if in_stream else 1
    try:
        (type_oid,) = _U32.unpack_from(data, pos)
    except struct.error:
        raise _truncated(kind, pos, "the type OID") from None
    namespace, pos = _read_string(data, pos + 4, kind, "the namespace")
    name, pos = _read_string(data, pos, kind, "the type name")
    _check_end(data, pos, kind)
    return Type(type_oid, namespace, name, xid)


def _row_head(data: bytes, in_stream: bool, kind: str) -> tuple[int | None, int, int]:
    """xid (in a streamed block), relation id and the first tuple marker byte."""
    try:
        if in_stream:
            xid, relation_id, marker = _XID_REL_KIND.unpack_from(data, 1)
            return xid, relation_id, marker
        relation_id, marker = _REL_KIND.unpack_from(data, 1)
    except struct.error:
        raise _truncated(kind, 1, "the relation id and tuple kind") from None
    return None, relation_id, marker


def _insert(data: bytes, in_stream: bool) -> Insert:
    # The most frequent message: the header and the column count come in one unpack, and
    # anything unusual is left to `_insert_slow` to report.
    try:
        if in_stream:
            xid, relation_id, marker, count = _STREAMED_INSERT_HEAD.unpack_from(data, 1)
            pos = 12
        else:
            relation_id, marker, count = _INSERT_HEAD.unpack_from(data, 1)
            xid = None
            pos = 8
    except struct.error:
        return _insert_slow(data, in_stream)
    if marker != _NEW or count < 0:
        return _insert_slow(data, in_stream)
    message = _new_object(Insert)
    attrs = message.__dict__
    attrs["relation_id"] = relation_id
    attrs["new"] = _new_tuple(data, pos, count)
    attrs["xid"] = xid
    return message


def _insert_row(data: bytes) -> tuple[int, TupleData]:
    """`_insert` outside a streamed block, returning (relation id, new tuple) only."""
    try:
        relation_id, marker, count = _INSERT_HEAD.unpack_from(data, 1)
    except struct.error:
        marker = count = -1
    if marker != _NEW or count < 0:
        message = _insert_slow(data, False)
        return message.relation_id, message.new
    return relation_id, _new_tuple(data, 8, count)


def _new_tuple(data: bytes, pos: int, count: int) -> TupleData:
    """An Insert's new tuple of `count` values from `pos` to the end of `data`."""
    size = len(data)
    padded = data + _PAD
    reader = _fast_readers.get(count) or _fast_reader(count)
    read = reader(padded, pos, size) if reader is not None else None
    if read is None:
        read = _read_values(padded, pos, size, count, "Insert")
    new, pos = read
    if pos != size:
        _check_end(data, pos, "Insert")
    return new


def _insert_slow(data: bytes, in_stream: bool) -> Insert:
    """Insert the step-by-step way; only reached for malformed input, to report it."""
    xid, relation_id, marker = _row_head(data, in_stream, "Insert")
    pos = 10 if in_stream else 6
    if marker != _NEW:
        raise DecodeError("Insert", pos - 1, f"expected 'N' tuple, got {marker:#04x}")
    size = len(data)
    new, pos = _read_tuple(data + _PAD, pos, size, "Insert")
    _check_end(data, pos, "Insert")
    return Insert(relation_id, new, xid)


def _update(data: bytes, in_stream: bool) -> Update:
    kind = "Update"
    xid, relation_id, marker = _row_head(data, in_stream, kind)
    pos = 10 if in_stream else 6
    size = len(data)
    padded = data + _PAD
    old: TupleData | None = None
    if marker in _OLD_TUPLE_MARKERS:
        old, pos = _read_tuple(padded, pos, size, kind)
        if pos >= size:
            raise _truncated(kind, pos, "the new tuple marker")
        key_only = marker == _KEY
        marker = padded[pos]
        pos += 1
    else:
        key_only = False
    if marker != _NEW:
        raise DecodeError(kind, pos - 1, f"expected 'K', 'O' or 'N' tuple, got {marker:#04x}")
    new, pos = _read_tuple(padded, pos, size, kind)
    if pos != size:
        _check_end(data, pos, kind)
    message = _new_object(Update)
    attrs = message.__dict__
    attrs["relation_id"] = relation_id
    attrs["new"] = new
    attrs["old"] = old
    attrs["old_is_key_only"] = key_only
    attrs["xid"] = xid
    return message


def _delete(data: bytes, in_stream: bool) -> Delete:
    kind = "Delete"
    xid, relation_id, marker = _row_head(data, in_stream, kind)
    pos = 10 if in_stream else 6
    if marker not in _OLD_TUPLE_MARKERS:
        raise DecodeError(kind, pos - 1, f"expected 'K' or 'O' tuple, got {marker:#04x}")
    size = len(data)
    old, pos = _read_tuple(data + _PAD, pos, size, kind)
    if pos != size:
        _check_end(data, pos, kind)
    message = _new_object(Delete)
    attrs = message.__dict__
    attrs["relation_id"] = relation_id
    attrs["old"] = old
    attrs["old_is_key_only"] = marker == _KEY
    attrs["xid"] = xid
    return message


def _truncate(data: bytes, in_stream: bool) -> Truncate:
    kind = "Truncate"
    xid = _read_xid(data, kind) if in_stream else None
    pos = 5 if in_stream else 1
    try:
        count, options = _TRUNCATE_HEAD.unpack_from(data, pos)
    except struct.error:
        raise _truncated(kind, pos, "the relation count and options") from None
    if count < 0:
        raise DecodeError(kind, pos, f"negative relation count {count}")
    pos += 5
    expected = pos + 4 * count
    if expected > len(data):
        raise _truncated(kind, pos, f"the list of {count} relation ids")
    _check_end(data, expected, kind)
    relation_ids = struct.unpack_from(f"!{count}I", data, pos)
    return Truncate(options, relation_ids, xid)


def _message(data: bytes, in_stream: bool) -> LogicalMessage:
    kind = "Message"
    xid = _read_xid(data, kind) if in_stream else None
    pos = 5 if in_stream else 1
    try:
        flags, lsn = _MESSAGE_HEAD.unpack_from(data, pos)
    except struct.error:
        raise _truncated(kind, pos, "the flags and LSN") from None
    prefix, pos = _read_string(data, pos + 9, kind, "the prefix")
    try:
        (length,) = _I32.unpack_from(data, pos)
    except struct.error:
        raise _truncated(kind, pos, "the content length") from None
    end = pos + 4 + length
    if length < 0 or end > len(data):
        raise DecodeError(kind, pos, f"bad content length {length}")
    _check_end(data, end, kind)
    return LogicalMessage(flags, lsn, prefix, data[pos + 4 : end], xid)


def _stream_start(data: bytes, in_stream: bool) -> StreamStart:
    try:
        xid, first_segment = _STREAM_START.unpack_from(data, 1)
    except struct.error:
        raise _truncated("StreamStart", 1, "the Stream Start fields") from None
    if first_segment > 1:
        raise DecodeError("StreamStart", 5, f"first segment flag is {first_segment}, not 0 or 1")
    _check_end(data, 6, "StreamStart")
    return StreamStart(xid, first_segment == 1)


def _stream_stop(data: bytes, in_stream: bool) -> StreamStop:
    _check_end(data, 1, "StreamStop")
    return StreamStop()


def _stream_commit(data: bytes, in_stream: bool) -> StreamCommit:
    try:
        xid, flags, commit_lsn, end_lsn, commit_ts = _STREAM_COMMIT.unpack_from(data, 1)
    except struct.error:
        raise _truncated("StreamCommit", 1, "the Stream Commit fields") from None
    _check_end(data, 30, "StreamCommit")
    return StreamCommit(xid, flags, commit_lsn, end_lsn, commit_ts)


def _stream_abort(data: bytes, in_stream: bool) -> StreamAbort:
    try:
        xid, subxid = _STREAM_ABORT.unpack_from(data, 1)
    except struct.error:
        raise _truncated("StreamAbort", 1, "the Stream Abort fields") from None
    if len(data) == 25:
        # Protocol 4 (parallel apply) appends abort_lsn and abort timestamp.
        raise DecodeError("StreamAbort", 9, "protocol 4 Stream Abort is not supported")
    _check_end(data, 9, "StreamAbort")
    return StreamAbort(xid, subxid)


def _unknown(data: bytes, in_stream: bool) -> Message:
    raise DecodeError("unknown", 0, f"unknown message type byte {data[0]:#04x}")


_HANDLERS: dict[bytes, Callable[[bytes, bool], Message]] = {
    b"B": _begin,
    b"C": _commit,
    b"O": _origin,
    b"R": _relation,
    b"Y": _type,
    b"I": _insert,
    b"U": _update,
    b"D": _delete,
    b"T": _truncate,
    b"M": _message,
    b"S": _stream_start,
    b"E": _stream_stop,
    b"c": _stream_commit,
    b"A": _stream_abort,
}
# Indexed by the type byte: a list lookup is the cheapest dispatch.
_DISPATCH: list[Callable[[bytes, bool], Message]] = [
    _HANDLERS.get(bytes([byte]), _unknown) for byte in range(256)
]


def decode(payload: bytes | memoryview, *, in_stream: bool) -> Message:
    """Decode one pgoutput message, starting at its type byte.

    `in_stream` is True for messages between Stream Start and Stream Stop: there R, Y, I, U,
    D, T and M carry the streamed transaction's xid. Raises `DecodeError` on any malformed
    input.
    """
    data = payload if type(payload) is bytes else bytes(payload)
    if not data:
        raise DecodeError("unknown", 0, "empty message")
    return _DISPATCH[data[0]](data, in_stream)


class Decoder:
    """Decodes the messages of one replication stream in order, tracking streamed blocks.

    Stream Start enters a streamed block and Stream Stop leaves it; a Stream Start inside a
    block or a Stream Stop outside one is malformed input and raises `DecodeError`, leaving
    the state unchanged.
    """

    __slots__ = ("_in_stream",)

    def __init__(self) -> None:
        self._in_stream = False

    @property
    def in_stream(self) -> bool:
        """True between a Stream Start and its Stream Stop."""
        return self._in_stream

    def insert_row(self, payload: bytes) -> tuple[int, TupleData] | None:
        """The hot path for the most frequent message: for an Insert outside a streamed
        block, its relation id and new tuple, without building the `Insert`; None for any
        other message, which the caller then passes to `decode`. Checks and errors are
        those of `decode`."""
        if self._in_stream or payload[:1] != b"I":
            return None
        return _insert_row(payload if type(payload) is bytes else bytes(payload))

    def decode(self, payload: bytes | memoryview) -> Message:
        """Decode the next message of the stream; see `decode`."""
        data = payload if type(payload) is bytes else bytes(payload)
        if not data:
            raise DecodeError("unknown", 0, "empty message")
        message = _DISPATCH[data[0]](data, self._in_stream)
        cls = type(message)
        if cls is StreamStart:
            if self._in_stream:
                raise DecodeError("StreamStart", 0, "Stream Start inside a streamed block")
            self._in_stream = True
        elif cls is StreamStop:
            if not self._in_stream:
                raise DecodeError("StreamStop", 0, "Stream Stop outside a streamed block")
            self._in_stream = False
        return message
