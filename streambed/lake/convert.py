"""Postgres text-form values → Arrow columns. Pure: no I/O.

Each column is converted at once: the raw values become one Arrow binary array, which is
validated as UTF-8 and cast with `pyarrow.compute`. Only when Arrow cannot parse a column
(BC or year > 9999 dates, offsets with seconds, `NaN` in a decimal column, …) is that
column converted value by value in Python, and a value that has no exact Iceberg form
raises SchemaError: nothing is clamped or dropped.

Text forms assume the replication session's defaults for output: DateStyle ISO,
bytea_output hex, extra_float_digits >= 1 (shortest exact floats), client_encoding UTF8.

Unchanged TOAST values (`UNCHANGED`) become NULL in the table, and a boolean mask per
column that had any says which rows must take the value from the row already in the lake.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from operator import itemgetter
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from streambed.buffer.changes import TableKey
from streambed.core.errors import Kind, SchemaError, StreambedError
from streambed.lake.types import ColumnType, column_type
from streambed.pgoutput.messages import UNCHANGED, Binary, Relation, TupleValue

_MICROS_PER_DAY: Final = 86_400_000_000

DATE_INFINITY: Final = 2**31 - 1
"""Postgres date 'infinity' is stored as this many days ('-infinity' as its negation):
DuckDB's own infinite date, so the query side reads and renders it as infinity."""

TIMESTAMP_INFINITY: Final = 2**63 - 1
"""Postgres timestamp[tz] 'infinity' in microseconds ('-infinity': its negation), as DuckDB
stores its own infinite timestamps."""
_DATE = re.compile(r"^(\d{4,})-(\d\d)-(\d\d)( BC)?$")
_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?$")
_TIMESTAMP = re.compile(
    r"^(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    r"(?:([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?)?( BC)?$"
)


@dataclass(frozen=True)
class ConvertedRows:
    """Rows as an Arrow table, and where unchanged TOAST values were.

    `unchanged[name][i]` is True when row i's value of column `name` was not sent and
    must be taken from the existing lake row; those cells are NULL in `table`. Columns
    without any unchanged value are absent from the dict.
    """

    table: pa.Table
    unchanged: dict[str, pa.BooleanArray]


class _Unrepresentable(ValueError):
    """One value has no exact form in the column's Iceberg type."""


def rows_to_arrow(
    relation: Relation,
    rows: Sequence[Sequence[TupleValue]],
    schema: pa.Schema | None = None,
) -> ConvertedRows:
    """Convert full rows (one value per relation column) to an Arrow table.

    `schema` is the target Arrow schema (e.g. `streambed.lake.tables.arrow_schema(table)`,
    which carries the Iceberg field ids); it must name the relation's columns. Without it
    the schema is derived from the relation.
    """
    indexes = tuple(range(len(relation.columns)))
    arrays, unchanged = _convert(relation, indexes, rows, allow_unchanged=True)
    return ConvertedRows(_table(relation, indexes, arrays, schema), unchanged)


def keys_to_arrow(
    relation: Relation,
    key: TableKey,
    keys: Sequence[Sequence[TupleValue]],
    schema: pa.Schema | None = None,
) -> pa.Table:
    """Convert key tuples (values in `key.columns` order) to an Arrow table of the key columns.

    For a keyless table with REPLICA IDENTITY FULL (`key.full_row`), a key is the whole old
    row. `schema` may be the full table schema; only the key columns are taken from it.
    """
    indexes = key_indexes(relation, key)
    arrays, _ = _convert(relation, indexes, keys, allow_unchanged=False)
    return _table(relation, indexes, arrays, schema)


def key_indexes(relation: Relation, key: TableKey) -> tuple[int, ...]:
    """Indexes into relation.columns of the values that identify a row."""
    if key.columns:
        return key.columns
    if key.full_row:
        return tuple(range(len(relation.columns)))
    return ()


def arrow_schema_of(relation: Relation) -> pa.Schema:
    """The Arrow schema derived from the relation alone (no field ids)."""
    return pa.schema([pa.field(c.name, column_type(c).arrow) for c in relation.columns])


def convert_column(
    values: Sequence[TupleValue],
    ctype: ColumnType,
    *,
    where: str = "column",
    allow_unchanged: bool = True,
) -> tuple[pa.Array, pa.BooleanArray | None]:
    """One column of text-form values → (Arrow array of `ctype.arrow`, unchanged mask or None).

    `where` ("schema.table.column") names the column in error messages.
    """
    raw, cleaned, mask = _raw(values, where, allow_unchanged)
    try:
        text = raw.cast(pa.string())
    except pa.ArrowInvalid as e:
        raise SchemaError(
            f"{where}: a value is not valid UTF-8 ({e}); set client_encoding=UTF8 on the "
            "replication connection"
        ) from e
    return _typed(text, cleaned, ctype, where), mask


# ---- internals -------------------------------------------------------------------------


def _convert(
    relation: Relation,
    indexes: tuple[int, ...],
    rows: Sequence[Sequence[TupleValue]],
    *,
    allow_unchanged: bool,
) -> tuple[list[pa.Array], dict[str, pa.BooleanArray]]:
    width = len(indexes)
    widths = set(map(len, rows))
    if widths - {width}:
        raise StreambedError(
            f"{relation.namespace}.{relation.name}: got tuples of {sorted(widths)} values for "
            f"{width} columns; the relation changed without a new Relation message",
            kind=Kind.PROTOCOL,
        )
    columns = [list(map(itemgetter(position), rows)) for position in range(width)]
    arrays: list[pa.Array] = []
    unchanged: dict[str, pa.BooleanArray] = {}
    for position, index in enumerate(indexes):
        column = relation.columns[index]
        where = f"{relation.namespace}.{relation.name}.{column.name}"
        array, mask = convert_column(
            columns[position], column_type(column), where=where, allow_unchanged=allow_unchanged
        )
        arrays.append(array)
        if mask is not None:
            unchanged[column.name] = mask
    return arrays, unchanged


def _table(
    relation: Relation,
    indexes: tuple[int, ...],
    arrays: list[pa.Array],
    schema: pa.Schema | None,
) -> pa.Table:
    names = [relation.columns[i].name for i in indexes]
    if schema is None:
        return pa.Table.from_arrays(arrays, names=names)
    fields = []
    out = []
    for name, array in zip(names, arrays, strict=True):
        index = schema.get_field_index(name)
        if index < 0:
            raise SchemaError(
                f"{relation.namespace}.{relation.name}: column {name!r} is not in the lake "
                "table; the source schema changed (schema evolution is not supported yet)"
            )
        field = schema.field(index)
        if array.type != field.type:
            array = array.cast(field.type)
        fields.append(field)
        out.append(array)
    return pa.Table.from_arrays(out, schema=pa.schema(fields))


def _raw(
    values: Sequence[TupleValue], where: str, allow_unchanged: bool
) -> tuple[pa.BinaryArray, Sequence[bytes | None], pa.BooleanArray | None]:
    try:
        return pa.array(values, pa.binary()), values, None  # type: ignore[return-value]
    except (pa.ArrowTypeError, pa.ArrowInvalid, TypeError):
        pass
    cleaned: list[bytes | None] = []
    mask: list[bool] = []
    for value in values:
        if value is UNCHANGED:
            if not allow_unchanged:
                raise StreambedError(
                    f"{where}: a key value is marked unchanged (TOAST); keys are always sent",
                    kind=Kind.PROTOCOL,
                )
            cleaned.append(None)
            mask.append(True)
        elif isinstance(value, Binary):
            raise StreambedError(
                f"{where}: received a binary-format value; streambed starts replication in "
                "text format, so the publisher or a proxy changed the protocol options",
                kind=Kind.PROTOCOL,
            )
        elif value is None or isinstance(value, bytes):
            cleaned.append(value)
            mask.append(False)
        else:
            raise StreambedError(
                f"{where}: unexpected value {value!r} of type {type(value).__name__}",
                kind=Kind.INTERNAL,
            )
    return (
        pa.array(cleaned, pa.binary()),
        cleaned,
        pa.array(mask, pa.bool_()) if any(mask) else None,
    )


def _typed(
    text: pa.StringArray, raw: Sequence[bytes | None], ctype: ColumnType, where: str
) -> pa.Array:
    kind = ctype.kind
    if kind == "string":
        return text
    if kind == "binary":
        return _fallback(raw, ctype, where, _parse_bytea, pa.binary())
    if kind == "bool":
        is_true = pc.equal(text, "t")
        valid = pc.or_(is_true, pc.equal(text, "f"))
        if pc.all(valid).as_py() is False:
            return _fallback(raw, ctype, where, _parse_bool, pa.bool_())
        return is_true
    if kind == "time":
        try:
            stamped = pc.binary_join_element_wise("1970-01-01 ", text, "")
            return pc.cast(pc.cast(stamped, pa.timestamp("us")), ctype.arrow)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _fallback(raw, ctype, where, _parse_time, pa.int64())
    try:
        return pc.cast(text, ctype.arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    parser, storage = _FALLBACK[kind]
    return _fallback(raw, ctype, where, parser, storage or ctype.arrow)


def _fallback(
    raw: Sequence[bytes | None],
    ctype: ColumnType,
    where: str,
    parse: Callable[[str, ColumnType], Any],
    storage: pa.DataType,
) -> pa.Array:
    out: list[Any] = []
    for value in raw:
        if value is None:
            out.append(None)
            continue
        text = value.decode()
        try:
            out.append(parse(text, ctype))
        except (_Unrepresentable, ValueError, InvalidOperation, OverflowError) as e:
            reason = str(e) or type(e).__name__
            raise SchemaError(
                f"{where}: value {text!r} cannot be stored exactly as Iceberg {ctype.iceberg} "
                f"({reason}). Nothing was written. Fix: change the value in the source, cast the "
                "column to text in the source, or leave the table out with "
                "STREAMBED_EXCLUDE_TABLES until streambed stores such values"
            ) from e
    try:
        array = pa.array(out, storage)
        return array if storage == ctype.arrow else array.cast(ctype.arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(
            f"{where}: values cannot be stored as Iceberg {ctype.iceberg}: {e}. Cast the column "
            "to text in the source, or leave the table out with STREAMBED_EXCLUDE_TABLES"
        ) from e


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (year 0 = 1 BC)."""
    if not (1 <= month <= 12 and 1 <= day <= 31):
        raise _Unrepresentable("not a calendar date")
    year -= month <= 2
    era = year // 400  # floor division: Python rounds down for negative years too
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _year(digits: str, bc: str | None) -> int:
    year = int(digits)
    return 1 - year if bc else year


def _not_iso(text: str) -> _Unrepresentable:
    return _Unrepresentable("not an ISO date/time; the replication session must use DateStyle ISO")


def _parse_date(text: str, _: ColumnType) -> int:
    if text == "infinity":
        return DATE_INFINITY
    if text == "-infinity":
        return -DATE_INFINITY
    m = _DATE.match(text)
    if m is None:
        raise _not_iso(text)
    days = _days_from_civil(_year(m[1], m[4]), int(m[2]), int(m[3]))
    if not -DATE_INFINITY < days < DATE_INFINITY:
        raise _Unrepresentable("beyond the 32-bit day range")
    return days


def _parse_time(text: str, _: ColumnType) -> int:
    m = _TIME.match(text)
    if m is None:
        raise _not_iso(text)
    micros = ((int(m[1]) * 60 + int(m[2])) * 60 + int(m[3])) * 1_000_000
    micros += int((m[4] or "0").ljust(6, "0"))
    if micros > _MICROS_PER_DAY:
        raise _Unrepresentable("a time of day after 24:00:00")
    return micros  # 24:00:00 is kept as 86400000000 µs, which DuckDB reads as 24:00:00


def _parse_timestamp(text: str, ctype: ColumnType) -> int:
    if text == "infinity":
        return TIMESTAMP_INFINITY
    if text == "-infinity":
        return -TIMESTAMP_INFINITY
    m = _TIMESTAMP.match(text)
    if m is None:
        raise _not_iso(text)
    has_offset = m[8] is not None
    if has_offset != (ctype.kind == "timestamptz"):
        raise _Unrepresentable("time zone offset present/absent unexpectedly")
    days = _days_from_civil(_year(m[1], m[12]), int(m[2]), int(m[3]))
    seconds = days * 86_400 + (int(m[4]) * 60 + int(m[5])) * 60 + int(m[6])
    if has_offset:
        offset = (int(m[9]) * 60 + int(m[10] or 0)) * 60 + int(m[11] or 0)
        seconds -= offset if m[8] == "+" else -offset
    micros = seconds * 1_000_000 + int((m[7] or "0").ljust(6, "0"))
    if not -TIMESTAMP_INFINITY < micros < TIMESTAMP_INFINITY:
        raise _Unrepresentable(
            "beyond 294246 AD, the end of 64-bit microseconds since 1970 (Postgres goes to "
            "294276 AD)"
        )
    return micros


def _parse_decimal(text: str, ctype: ColumnType) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise _Unrepresentable("Iceberg decimals have no NaN or infinity")
    return value


def _parse_int(text: str, _: ColumnType) -> int:
    return int(text)


def _parse_float(text: str, _: ColumnType) -> float:
    return float(text)


def _parse_bool(text: str, _: ColumnType) -> bool:
    if text in ("t", "f"):
        return text == "t"
    raise _Unrepresentable("not a Postgres boolean (t or f)")


def _parse_bytea(text: str, _: ColumnType) -> bytes:
    if text.startswith("\\x"):
        return binascii.unhexlify(text[2:])
    return _unescape_bytea(text)


def _unescape_bytea(text: str) -> bytes:
    """bytea_output=escape: backslash-octal escapes and doubled backslashes."""
    out = bytearray()
    i = 0
    data = text.encode()
    while i < len(data):
        byte = data[i]
        if byte != 0x5C:
            out.append(byte)
            i += 1
        elif data[i + 1 : i + 2] == b"\\":
            out.append(0x5C)
            i += 2
        elif len(data) >= i + 4 and all(0x30 <= c <= 0x37 for c in data[i + 1 : i + 4]):
            out.append(int(data[i + 1 : i + 4], 8))
            i += 4
        else:
            raise _Unrepresentable("malformed bytea escape")
    return bytes(out)


# kind → (parser of one text value, Arrow type of what it returns; None: the column's type)
_FALLBACK: Final[dict[str, tuple[Callable[[str, ColumnType], Any], pa.DataType | None]]] = {
    "int": (_parse_int, pa.int32()),
    "long": (_parse_int, pa.int64()),
    "float": (_parse_float, pa.float32()),
    "double": (_parse_float, pa.float64()),
    "decimal": (_parse_decimal, None),
    "date": (_parse_date, pa.int32()),
    "timestamp": (_parse_timestamp, pa.int64()),
    "timestamptz": (_parse_timestamp, pa.int64()),
}
