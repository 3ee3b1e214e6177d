"""RowDescription and DataRow messages from Arrow record batches.

This is the hot path. Each column of a batch is turned into a list of length-prefixed field
bytes in one vectorised step (Postgres-exact text from `pgtypes.encode_text_column`, binary
from numpy for fixed-width types), then each DataRow is one header pack plus one join, and the
whole batch is one bytes object the socket layer writes with one `sendall`.

Binary format is produced for bool, int2/4/8, oid, float4/8, date, time, timestamp,
timestamptz, uuid, numeric, interval, bytea, text types, json/jsonb and one-dimensional arrays
of those. If a column asked for in binary has another type (timetz), the whole result is sent
in text and RowDescription says so: clients read the format from it (psycopg reads the first
column's format for all columns, hence all or nothing).
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streambed.server import pgtypes
from streambed.server.pgarray import NotOneDimensional, parse_array
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
    table_oid: int = 0  # the table a column is taken straight from, and its number there
    column_number: int = 0


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
    return _with_nulls([buf[i : i + step] for i in range(0, n * step, step)], array, _NULL)


def _with_nulls(values: list[Any], array: pa.Array, null: Any) -> list[Any]:
    """`values` (one per row of `array`) with `null` at the rows where `array` is null."""
    if array.null_count:
        for i in np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False)):
            values[i] = null
    return values


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


_NUMERIC_HEADER = struct.Struct("!hhHH")


def numeric_binary_text(text: str) -> bytes:
    """numeric send format from a decimal string ("-123.4500"), without Decimal for the plain
    notation: the per-value work of the binary numeric column. Arrow writes some values in
    exponent notation ("0E-7"); those go through Decimal."""
    if "E" in text:
        return numeric_binary(Decimal(text))
    negative = text.startswith("-")
    if negative:
        text = text[1:]
    whole, _, fraction = text.partition(".")
    whole = whole.lstrip("0")
    whole = "0" * (-len(whole) % 4) + whole
    padded = fraction + "0" * (-len(fraction) % 4)
    digits = whole + padded
    groups = [int(digits[i : i + 4]) for i in range(0, len(digits), 4)]
    weight = len(whole) // 4 - 1
    first = 0
    while first < len(groups) and groups[first] == 0:
        first += 1
    last = len(groups)
    while last > first and groups[last - 1] == 0:
        last -= 1
    groups = groups[first:last]
    weight = weight - first if groups else 0
    header = _NUMERIC_HEADER.pack(
        len(groups), weight, 0x4000 if negative and groups else 0, len(fraction)
    )
    return header + struct.pack(f"!{len(groups)}H", *groups)


def numeric_binary_unscaled(unscaled: int, scale: int) -> bytes:
    """numeric send format of unscaled * 10^-scale (scale >= 0) from Python integers only:
    base-10000 digits by divmod, aligned so the fraction has whole groups."""
    negative = unscaled < 0
    rest = (-unscaled if negative else unscaled) * _POW10[-scale % 4]
    groups: list[int] = []  # least significant first
    while rest:
        rest, group = divmod(rest, 10000)
        groups.append(group)
    weight = len(groups) - 1 - (scale + 3) // 4
    low = 0
    while low < len(groups) and groups[low] == 0:
        low += 1
    digits = groups[low:][::-1]
    if not digits:
        return _NUMERIC_HEADER.pack(0, 0, 0, scale)
    header = _NUMERIC_HEADER.pack(len(digits), weight, 0x4000 if negative else 0, scale)
    return header + struct.pack(f"!{len(digits)}H", *digits)


_POW10 = (1, 10, 100, 1000)


def _unscaled_ints(array: pa.Array) -> list[int | None]:
    """The unscaled integers of a decimal128 array (or the values of an integer array), read
    from the data buffer by numpy: no Decimal objects."""
    if pa.types.is_integer(array.type):
        return array.to_pylist()  # type: ignore[no-any-return]
    low, high = _decimal_words(array)
    if bool(np.all(high == (low.view("<i8") >> 63))):  # every value fits in 64 bits
        values: list[int | None] = low.view("<i8").tolist()
    else:
        values = [(h << 64) | lo for h, lo in zip(high.tolist(), low.tolist(), strict=True)]
    return _with_nulls(values, array, None)


def _decimal_words(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The low (unsigned) and high (signed) 64-bit halves of a decimal128 array's unscaled
    values, from its data buffer."""
    n, offset = len(array), array.offset
    words = np.frombuffer(array.buffers()[1], dtype="<u8", count=2 * (offset + n))[2 * offset :]
    return words[0::2], words[1::2].view("<i8")


_INT_GROUPS = 5  # base-10000 digits of an integer part below 2^64
_FAST_SCALE = 15  # the fraction, aligned to whole groups, then stays below 10^18


def _int64_values(array: pa.Array) -> np.ndarray | None:
    """The unscaled integers of a decimal128 array (or an integer array) as int64, nulls as
    0; None when a value does not fit in 64 bits."""
    if pa.types.is_integer(array.type):
        if pa.types.is_uint64(array.type) and (pc.max(array).as_py() or 0) >= 2**63:
            return None
        return np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    low, high = _decimal_words(array)
    signed = low.view("<i8")
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    if not bool(np.all((high == (signed >> 63)) | ~valid)):  # a value beyond 64 bits
        return None
    return np.where(valid, signed, 0)


def numeric_binary_column(unscaled: np.ndarray, scale: int) -> Fields:
    """numeric send format of every unscaled int64 * 10^-scale (0 <= scale <= 15), with
    its length prefix, computed by numpy for the whole column: the same bytes as
    `numeric_binary_unscaled` gives value by value."""
    n = len(unscaled)
    fraction_groups = -(-scale // 4)
    width = _INT_GROUPS + fraction_groups
    magnitude = np.abs(unscaled).astype(np.uint64)  # |-2^63| wraps to 2^63 as uint64
    whole, fraction = np.divmod(magnitude, np.uint64(10**scale))
    fraction *= np.uint64(10 ** (4 * fraction_groups - scale))
    digits = np.empty((n, width), dtype=np.uint64)
    for j in range(_INT_GROUPS):
        digits[:, j] = whole // np.uint64(10000 ** (_INT_GROUPS - 1 - j)) % np.uint64(10000)
    for k in range(fraction_groups):
        digits[:, _INT_GROUPS + k] = (
            fraction // np.uint64(10000 ** (fraction_groups - 1 - k)) % np.uint64(10000)
        )
    nonzero = digits != 0
    present = nonzero.any(axis=1)
    lead = np.argmax(nonzero, axis=1)
    trail = width - 1 - np.argmax(nonzero[:, ::-1], axis=1)
    count = np.where(present, trail - lead + 1, 0)
    record = np.zeros(
        n,
        dtype=np.dtype(
            [("len", ">i4"), ("ndigits", ">i2"), ("weight", ">i2"), ("sign", ">u2"),
             ("dscale", ">i2"), ("digits", ">u2", (width,))]
        ),
    )  # fmt: skip
    record["len"] = 8 + 2 * count
    record["ndigits"] = count
    record["weight"] = np.where(present, _INT_GROUPS - 1 - lead, 0)
    record["sign"] = np.where(present & (unscaled < 0), 0x4000, 0)
    record["dscale"] = scale
    columns = np.minimum(lead[:, None] + np.arange(width), width - 1)
    record["digits"] = np.take_along_axis(digits, columns, axis=1)
    buf = record.tobytes()
    step = record.itemsize
    starts = range(0, n * step, step)
    return [buf[s : s + 12 + 2 * c] for s, c in zip(starts, count.tolist(), strict=True)]


def _numeric(array: pa.Array) -> Fields:
    if pa.types.is_decimal128(array.type) or pa.types.is_integer(array.type):
        scale = array.type.scale if pa.types.is_decimal(array.type) else 0
        values = _int64_values(array) if 0 <= scale <= _FAST_SCALE else None
        if values is not None:
            return _with_nulls(numeric_binary_column(values, scale), array, _NULL)
        encode = numeric_binary_unscaled
        return _prefixed([None if v is None else encode(v, scale) for v in _unscaled_ints(array)])
    if pa.types.is_decimal(array.type):
        texts = pc.cast(array, pa.string()).to_pylist()
        return _prefixed([None if t is None else numeric_binary_text(t) for t in texts])
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


def _array(element_oid: int, element: BinaryEncoder) -> BinaryEncoder:
    """One-dimensional arrays: header, then the elements' own length-prefixed fields."""
    empty = struct.pack("!iii", 0, 0, element_oid)

    def encode(array: pa.Array) -> Fields:
        flat = array.flatten()
        if pa.types.is_list(flat.type) or pa.types.is_large_list(flat.type):
            raise UnsupportedBinary(
                "binary format is not supported for multi-dimensional arrays; request text"
            )
        items = element(flat) if len(flat) else []
        offsets = array.offsets.to_pylist()
        base = offsets[0]
        valid = array.is_valid().to_pylist()
        pack = struct.Struct("!iiiii").pack
        out: list[bytes | None] = []
        for i, ok in enumerate(valid):
            if not ok:
                out.append(None)
                continue
            start, end = offsets[i] - base, offsets[i + 1] - base
            if start == end:
                out.append(empty)
                continue
            fields = items[start:end]
            has_null = 1 if _NULL in fields else 0
            out.append(pack(1, has_null, element_oid, end - start, 1) + b"".join(fields))
        return _prefixed(out)

    return encode


class UnsupportedBinary(Exception):
    """A value cannot be sent in binary format (SQLSTATE 0A000)."""

    sqlstate = "0A000"


def _text(pg_type: pgtypes.PgType, timezone: str, prefix: bytes = b"") -> BinaryEncoder:
    def encode(array: pa.Array) -> Fields:
        values = pgtypes.encode_text_column(array, pg_type, timezone)
        if prefix:
            values = [None if v is None else prefix + v for v in values]
        return _prefixed(values)

    return encode


# Types whose binary send format is the same bytes as their text output.
TEXT_LIKE_OIDS = frozenset({pgtypes.TEXT.oid, pgtypes.VARCHAR.oid, 19, 1042, pgtypes.JSON.oid})

_FIXED: dict[int, BinaryEncoder] = {
    pgtypes.BOOL.oid: _bool,
    pgtypes.INT2.oid: lambda a: _fixed(pc.cast(a, pa.int16()), ">i2", 2),
    pgtypes.INT4.oid: lambda a: _fixed(pc.cast(a, pa.int32()), ">i4", 4),
    pgtypes.OID.oid: lambda a: _fixed(pc.cast(a, pa.uint32()), ">u4", 4),
    pgtypes.INT8.oid: lambda a: _fixed(pc.cast(a, pa.int64()), ">i8", 8),
    pgtypes.FLOAT4.oid: lambda a: _fixed(pc.cast(a, pa.float32()), ">f4", 4),
    pgtypes.FLOAT8.oid: lambda a: _fixed(pc.cast(a, pa.float64()), ">f8", 8),
    pgtypes.DATE.oid: _date,
    pgtypes.TIMESTAMP.oid: _timestamp,
    pgtypes.TIMESTAMPTZ.oid: _timestamp,
    pgtypes.TIME.oid: _time,
    pgtypes.UUID.oid: _uuid,
    pgtypes.NUMERIC.oid: _numeric,
    pgtypes.INTERVAL.oid: _interval,
    pgtypes.BYTEA.oid: _bytea,
}


# Element types whose binary form is built from their text (arrays stored as text).
_FROM_TEXT: dict[int, pa.DataType | None] = {
    pgtypes.INT2.oid: pa.int16(),
    pgtypes.INT4.oid: pa.int32(),
    pgtypes.INT8.oid: pa.int64(),
    pgtypes.OID.oid: pa.uint32(),
    pgtypes.FLOAT4.oid: pa.float32(),
    pgtypes.FLOAT8.oid: pa.float64(),
    pgtypes.BOOL.oid: pa.bool_(),
    pgtypes.NUMERIC.oid: None,
    pgtypes.UUID.oid: None,
    pgtypes.JSONB.oid: None,
    **dict.fromkeys(TEXT_LIKE_OIDS),
}


def _text_array(element_type: pgtypes.PgType, element: BinaryEncoder) -> BinaryEncoder:
    """Arrays held as their Postgres text: parsed, then sent as `_array` sends lists."""
    arrow_type = _FROM_TEXT[element_type.oid]
    lists = _array(element_type.oid, element)

    def encode(array: pa.Array) -> Fields:
        try:
            parsed = [None if v is None else parse_array(v) for v in array.to_pylist()]
        except NotOneDimensional as e:
            raise UnsupportedBinary(
                "binary format is not supported for multi-dimensional arrays; request text"
            ) from e
        values = pa.array(parsed, pa.list_(pa.string()))
        if arrow_type is not None:
            flat = values.flatten()
            boolean = arrow_type == pa.bool_()
            typed = pc.equal(flat, "t") if boolean else pc.cast(flat, arrow_type)
            values = pa.ListArray.from_arrays(values.offsets, typed, mask=values.is_null())
        return lists(values)

    return encode


def binary_encoder(pg_type: pgtypes.PgType, timezone: str = "UTC") -> BinaryEncoder | None:
    """The binary encoder for a column type, or None when binary is not supported for it
    (timetz, arrays of such types, declared types stored as text other than arrays of
    numbers, booleans and strings, uuid, numeric, json/jsonb and text types)."""
    oid = pg_type.oid
    if pg_type.stored_as_text:
        plain = pgtypes.BY_OID.get(oid)
        if plain is None:
            return None
        if plain.element is not None:
            if plain.element.oid not in _FROM_TEXT:
                return None
            element = binary_encoder(plain.element, timezone)
            return None if element is None else _text_array(plain.element, element)
        if oid not in _FROM_TEXT or _FROM_TEXT[oid] is not None:
            return None
        return binary_encoder(plain, timezone)
    if pg_type.element is not None:
        element = binary_encoder(pg_type.element, timezone)
        return _array(pg_type.element.oid, element) if element is not None else None
    fixed = _FIXED.get(oid)
    if fixed is not None:
        return fixed
    if oid in TEXT_LIKE_OIDS:
        return _text(pg_type, timezone)
    if oid == pgtypes.JSONB.oid:
        return _text(pg_type, timezone, prefix=b"\x01")
    return None


class BatchEncoder:
    """Encodes record batches of one result into DataRow messages."""

    def __init__(self, columns: Sequence[ColumnSpec], timezone: str) -> None:
        self._columns = list(columns)
        self._timezone = timezone
        self._binary: list[BinaryEncoder | None] = [
            binary_encoder(c.pg_type, timezone) if c.format == 1 else None for c in self._columns
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
    columns: Sequence[tuple[str, pgtypes.PgType]],
    result_formats: Sequence[int],
    origins: Sequence[tuple[int, int]] = (),
) -> list[ColumnSpec]:
    """Columns with their wire format: no codes means all text, one applies to all, else one
    per column. If a column asked for in binary has no binary encoder, every column is sent
    in text (RowDescription says so): psycopg reads one format for the whole result."""
    wanted = [
        result_formats[0] if len(result_formats) == 1 else
        (result_formats[i] if i < len(result_formats) else 0)
        for i in range(len(columns))
    ]  # fmt: skip
    binary_possible = all(
        binary_encoder(pg_type) is not None
        for (_, pg_type), fmt in zip(columns, wanted, strict=True)
        if fmt == 1
    )
    return [
        ColumnSpec(
            name,
            pg_type.oid,
            pg_type.typmod,
            pg_type.typlen,
            fmt if binary_possible else 0,
            pg_type,
            *(origins[i] if i < len(origins) else (0, 0)),
        )
        for i, ((name, pg_type), fmt) in enumerate(zip(columns, wanted, strict=True))
    ]


def row_description(columns: Sequence[ColumnSpec]) -> bytes:
    parts = [struct.pack("!h", len(columns))]
    for c in columns:
        parts.append(messages.cstr(c.name))
        parts.append(
            struct.pack(
                "!ihihih", c.table_oid, c.column_number, c.type_oid, c.typlen, c.typmod, c.format
            )
        )
    return messages.message(messages.ROW_DESCRIPTION, b"".join(parts))
