"""Postgres column types → Iceberg and Arrow types. Pure: no I/O.

The mapping is decided once per column from the Relation message (type OID and type
modifier) and never loses data: a Postgres type with no exact Iceberg counterpart is
stored as its Postgres text form in a `string` column, which round-trips exactly.

| Postgres                         | Iceberg          | Arrow                  |
| -------------------------------- | ---------------- | ---------------------- |
| bool                             | boolean          | bool                   |
| int2, int4                       | int              | int32                  |
| int8, oid                        | long             | int64                  |
| float4                           | float            | float32                |
| float8                           | double           | float64                |
| numeric(p,s), 1 <= p <= 38, 0 <= s <= p | decimal(p,s) | decimal128(p,s)      |
| numeric (unconstrained, p > 38, negative or oversized scale) | string | string  |
| text, varchar, bpchar, name, "char" | string        | string                 |
| bytea                            | binary           | binary                 |
| date                             | date             | date32                 |
| time                             | time             | time64[us]             |
| timestamp                        | timestamp        | timestamp[us]          |
| timestamptz                      | timestamptz      | timestamp[us, UTC]     |
| uuid                             | string           | string                 |
| everything else (json, jsonb, enums, arrays, interval, timetz, money, …) | string | string |

uuid is stored as its canonical 36-character text: Iceberg's uuid type becomes a Parquet
FIXED_LEN_BYTE_ARRAY(16) with the UUID annotation and an Arrow extension type, which Spark
(the merge engine) cannot read or write; the text form is lossless and sorts like Postgres
sorts uuids. Arrays are text for now (list types are a later issue).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

import pyarrow as pa
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from streambed.pgoutput.messages import Relation, RelationColumn

# Type OIDs from pg_type.dat; stable across Postgres versions.
BOOL: Final = 16
BYTEA: Final = 17
CHAR: Final = 18
NAME: Final = 19
INT8: Final = 20
INT2: Final = 21
INT4: Final = 23
TEXT: Final = 25
OID: Final = 26
FLOAT4: Final = 700
FLOAT8: Final = 701
BPCHAR: Final = 1042
VARCHAR: Final = 1043
DATE: Final = 1082
TIME: Final = 1083
TIMESTAMP: Final = 1114
TIMESTAMPTZ: Final = 1184
NUMERIC: Final = 1700
UUID: Final = 2950
JSON: Final = 114
JSONB: Final = 3802

MAX_DECIMAL_PRECISION: Final = 38


@dataclass(frozen=True)
class ColumnType:
    """How one Postgres column is stored.

    `kind` names the conversion from Postgres text form: bool, int, long, float, double,
    decimal, string, binary, date, time, timestamp, timestamptz.
    """

    kind: str
    iceberg: IcebergType
    arrow: pa.DataType


_SIMPLE: Final[dict[int, ColumnType]] = {
    BOOL: ColumnType("bool", BooleanType(), pa.bool_()),
    INT2: ColumnType("int", IntegerType(), pa.int32()),
    INT4: ColumnType("int", IntegerType(), pa.int32()),
    INT8: ColumnType("long", LongType(), pa.int64()),
    OID: ColumnType("long", LongType(), pa.int64()),
    FLOAT4: ColumnType("float", FloatType(), pa.float32()),
    FLOAT8: ColumnType("double", DoubleType(), pa.float64()),
    BYTEA: ColumnType("binary", BinaryType(), pa.binary()),
    DATE: ColumnType("date", DateType(), pa.date32()),
    TIME: ColumnType("time", TimeType(), pa.time64("us")),
    TIMESTAMP: ColumnType("timestamp", TimestampType(), pa.timestamp("us")),
    TIMESTAMPTZ: ColumnType("timestamptz", TimestamptzType(), pa.timestamp("us", tz="UTC")),
}

STRING: Final = ColumnType("string", StringType(), pa.string())


def numeric_precision_scale(type_modifier: int) -> tuple[int, int] | None:
    """(precision, scale) of a numeric column's typmod, or None when unconstrained.

    Postgres packs `((precision << 16) | (scale & 0x7ff)) + 4`; since Postgres 15 the
    scale is an 11-bit signed number and may be negative or exceed the precision.
    """
    if type_modifier < 4:
        return None
    packed = type_modifier - 4
    precision = (packed >> 16) & 0xFFFF
    scale = packed & 0x7FF
    if scale >= 0x400:
        scale -= 0x800
    return precision, scale


def column_type(column: RelationColumn) -> ColumnType:
    """The storage of a column, from its type OID and modifier."""
    simple = _SIMPLE.get(column.type_oid)
    if simple is not None:
        return simple
    if column.type_oid == NUMERIC:
        ps = numeric_precision_scale(column.type_modifier)
        if ps is not None:
            precision, scale = ps
            if 1 <= precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
                return ColumnType(
                    "decimal", DecimalType(precision, scale), pa.decimal128(precision, scale)
                )
    return STRING


def with_base_types(relation: Relation, bases: Mapping[int, tuple[int, int]]) -> Relation:
    """The relation with each domain-typed column given its base type (`bases`: domain OID
    → (base OID, base type modifier), e.g. from `SourceCatalog.base_types`). A column's own
    modifier wins over the domain's when it has one."""
    if not any(c.type_oid in bases for c in relation.columns):
        return relation
    columns = []
    for c in relation.columns:
        base = bases.get(c.type_oid)
        if base is None:
            columns.append(c)
        else:
            modifier = c.type_modifier if c.type_modifier >= 0 else base[1]
            columns.append(RelationColumn(c.flags, c.name, base[0], modifier))
    return replace(relation, columns=tuple(columns))
