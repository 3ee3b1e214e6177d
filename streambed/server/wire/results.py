"""RowDescription and DataRow messages from Arrow record batches.

This is the hot path. Each column of a batch is turned into a list of length-prefixed field
bytes in one vectorised step (Postgres-exact text from `pgtypes.encode_text_column`, binary
from numpy for fixed-width types), then each DataRow is one header pack plus one join, and the
whole batch is one bytes object the socket layer writes with one `sendall`.

Binary format is produced for bool, int2/4/8, float4/8, date, time, timestamp, timestamptz,
uuid, numeric, interval, bytea and the string types. A column of any other type asked for in
binary is sent in text and its RowDescription says so (format 0); psycopg and pgjdbc read the
format from the RowDescription, so they decode it correctly.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streambed.server import pgtypes
from streambed.server.wire import messages

_I32 = struct.Struct("!i")
_DATA_ROW = struct.Struct("!cih")
_NULL = b"\xff\xff\xff\xff"
_PG_EPOCH_DAYS = 10957  # 2000-01-01 - 1970-01-01
_PG_EPOCH_MICROS = _PG_EPOCH_DAYS * 86_400_000_000

Fields = list[bytes]  # one length-prefixed field per row
BinaryEncoder = Callable[[pa.Array], Fields]


@dataclass(frozen=True)
class ColumnSpec:
    """What RowDescription says about one result column."""

    name: str
    type_oid: int
    typmod: int
    typlen: int
    format: int  # 0 text, 1 binary (only if a binary encoder exists for the type)
    pg_type: pgtypes.PgType


def _prefixed(values: Sequence[bytes | None]) -> Fields:
    pack = _I32.pack
    return [_NULL if v is None else pack(len(v)) + v for v in values]


def _fixed(array: pa.Array, dtype: str, width: int, offset: int = 0) -> Fields:
    """Big-endian fixed-width values with their length prefix, built by numpy in one go."""
    n = len(array)
    if n == 0:
        return []
    values = array.fill_null(0) if array.null_count else array
    numbers = values.to_numpy(zero_copy_only=False)
    if offset:
        numbers = numbers - offset
    record = np.empty(n, dtype=np.dtype([("len", ">i4"), ("v", dtype)]))
    record["len"] = width
    record["v"] = numbers
    buf = record.tobytes()
    step = 4 + width
    fields = [buf[i : i + step] for i in range(0, n * step, step)]
    if array.null_count:
        for i in np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False)):
            fields[i] = _NULL
    return fields


def _bool(array: pa.Array) -> Fields:
    return _fixed(pc.cast(array, pa.uint8()), "u1", 1)


def _date(array: pa.Array) -> Fields:
    return _fixed(pc.cast(array, pa.int32()), ">i4", 4, _PG_EPOCH_DAYS)


def _timestamp(array: pa.Array) -> Fields:
    micros = pc.cast(pc.cast(array, pa.timestamp("us", array.type.tz)), pa.int64())
    return _fixed(micros, ">i8", 8, _PG_EPOCH_MICROS)


def _time(array: pa.Array) -> Fields:
    return _fixed(pc.cast(pc.cast(array, pa.time64("us")), pa.int64()), ">i8", 8)


def _bytea(array: pa.Array) -> Fields:
    return _prefixed(array.to_pylist())


def _uuid(array: pa.Array) -> Fields:
    if pa.types.is_fixed_size_binary(array.type):
        return _prefixed(array.to_pylist())
    return _prefixed([None if v is None else uuid.UUID(v).bytes for v in array.to_pylist()])


def numeric_binary(value: Decimal) -> bytes:
    """Postgres numeric send format: ndigits, weight, sign, dscale, base-10000 digits."""
    if value.is_nan():
        return struct.pack("!hhHH", 0, 0, 0xC000, 0)
    if value.is_infinite():
        return struct.pack("!hhHH", 0, 0, 0xD000 if value > 0 else 0xF000, 0)
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    dscale = max(-exponent, 0)
    text = "".join(map(str, digits))
    if exponent > 0:
        text += "0" * exponent
        exponent = 0
    text = text.rjust(-exponent, "0")
    int_part = text[: len(text) + exponent] if exponent else text
    frac_part = text[len(text) + exponent :] if exponent else ""
    int_part = int_part.lstrip("0")
    int_part = "0" * (-len(int_part) % 4) + int_part
    frac_part = frac_part + "0" * (-len(frac_part) % 4)
    groups = [int(int_part[i : i + 4]) for i in range(0, len(int_part), 4)]
    weight = len(groups) - 1
    groups += [int(frac_part[i : i + 4]) for i in range(0, len(frac_part), 4)]
    while groups and groups[0] == 0:  # leading zero groups (value < 1)
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack(
        f"!hhHH{len(groups)}H", len(groups), weight, 0x4000 if sign else 0, dscale, *groups
    )


def _numeric(array: pa.Array) -> Fields:
    out: list[bytes | None] = []
    for v in array.to_pylist():
        out.append(None if v is None else numeric_binary(Decimal(v)))
    return _prefixed(out)


def _interval(array: pa.Array) -> Fields:
    out: list[bytes | None] = []
    for v in array.to_pylist():
        if v is None:
            out.append(None)
        elif isinstance(v, datetime.timedelta):
            out.append(struct.pack("!qii", v.seconds * 1_000_000 + v.microseconds, v.days, 0))
        else:
            out.append(struct.pack("!qii", v.nanoseconds // 1000, v.days, v.months))
    return _prefixed(out)


def binary_encoder(pg_type: pgtypes.PgType) -> BinaryEncoder | None:
    """The binary encoder for a column, or None when its binary form is its text form (text
    types) or when it is not supported in binary (sent as text, see module docstring)."""
    oid = pg_type.oid
    if oid == pgtypes.BOOL.oid:
        return _bool
    if oid == pgtypes.INT2.oid:
        return lambda a: _fixed(pc.cast(a, pa.int16()), ">i2", 2)
    if oid == pgtypes.INT4.oid:
        return lambda a: _fixed(pc.cast(a, pa.int32()), ">i4", 4)
    if oid == pgtypes.INT8.oid:
        return lambda a: _fixed(pc.cast(a, pa.int64()), ">i8", 8)
    if oid == pgtypes.FLOAT4.oid:
        return lambda a: _fixed(pc.cast(a, pa.float32()), ">f4", 4)
    if oid == pgtypes.FLOAT8.oid:
        return lambda a: _fixed(pc.cast(a, pa.float64()), ">f8", 8)
    if oid == pgtypes.DATE.oid:
        return _date
    if oid in (pgtypes.TIMESTAMP.oid, pgtypes.TIMESTAMPTZ.oid):
        return _timestamp
    if oid == pgtypes.TIME.oid:
        return _time
    if oid == pgtypes.UUID.oid:
        return _uuid
    if oid == pgtypes.NUMERIC.oid:
        return _numeric
    if oid == pgtypes.INTERVAL.oid:
        return _interval
    if oid == pgtypes.BYTEA.oid:
        return _bytea
    return None


# Types whose binary send format is the same bytes as their text output.
TEXT_LIKE_OIDS = frozenset({pgtypes.TEXT.oid, pgtypes.VARCHAR.oid, 19, 1042, pgtypes.JSON.oid})


class BatchEncoder:
    """Encodes record batches of one result into DataRow messages."""

    def __init__(self, columns: Sequence[ColumnSpec], timezone: str) -> None:
        self._columns = list(columns)
        self._timezone = timezone
        self._binary: list[BinaryEncoder | None] = [
            binary_encoder(c.pg_type) if c.format == 1 else None for c in self._columns
        ]

    def _column(self, index: int, array: pa.Array) -> Fields:
        spec = self._columns[index]
        encoder = self._binary[index]
        if encoder is not None:
            return encoder(array)
        return _prefixed(pgtypes.encode_text_column(array, spec.pg_type, self._timezone))

    def encode(self, batch: pa.RecordBatch) -> bytes:
        """All rows of `batch` as concatenated DataRow messages."""
        n: int = batch.num_rows
        if n == 0:
            return b""
        ncols = len(self._columns)
        pack = _DATA_ROW.pack
        tag = messages.DATA_ROW
        if ncols == 0:
            return pack(tag, 6, 0) * n
        columns = [self._column(i, batch.column(i)) for i in range(ncols)]
        join = b"".join
        parts: list[bytes] = []
        append = parts.append
        for row in zip(*columns, strict=True):
            body = join(row)
            append(pack(tag, len(body) + 6, ncols))
            append(body)
        return join(parts)


def column_specs(
    columns: Sequence[tuple[str, pgtypes.PgType]], result_formats: Sequence[int]
) -> list[ColumnSpec]:
    """Columns with their wire format: none means all text, one applies to all, else one each."""
    specs: list[ColumnSpec] = []
    for i, (name, pg_type) in enumerate(columns):
        if len(result_formats) == 1:
            wanted = result_formats[0]
        elif i < len(result_formats):
            wanted = result_formats[i]
        else:
            wanted = 0
        binary_ok = binary_encoder(pg_type) is not None or pg_type.oid in TEXT_LIKE_OIDS
        fmt = 1 if wanted == 1 and binary_ok else 0
        specs.append(ColumnSpec(name, pg_type.oid, pg_type.typmod, pg_type.typlen, fmt, pg_type))
    return specs


def row_description(columns: Sequence[ColumnSpec]) -> bytes:
    parts = [struct.pack("!h", len(columns))]
    for c in columns:
        parts.append(messages.cstr(c.name))
        parts.append(struct.pack("!ihihih", 0, 0, c.type_oid, c.typlen, c.typmod, c.format))
    return messages.message(messages.ROW_DESCRIPTION, b"".join(parts))
