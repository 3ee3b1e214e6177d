"""Postgres text form → Arrow values, and the type mapping. Table-driven, no I/O."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from streambed.buffer.changes import TableKey
from streambed.core.errors import Kind, SchemaError, StreambedError
from streambed.lake import types as t
from streambed.lake.convert import (
    convert_column,
    keys_to_arrow,
    rows_to_arrow,
)
from streambed.lake.types import column_type, numeric_precision_scale
from streambed.pgoutput.messages import (
    UNCHANGED,
    Binary,
    Relation,
    RelationColumn,
    TupleValue,
)

UTC = dt.UTC


def numeric(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


def col(type_oid: int, modifier: int = -1, name: str = "c", flags: int = 0) -> RelationColumn:
    return RelationColumn(flags=flags, name=name, type_oid=type_oid, type_modifier=modifier)


MAPPING = [
    (t.BOOL, -1, BooleanType(), pa.bool_()),
    (t.INT2, -1, IntegerType(), pa.int32()),
    (t.INT4, -1, IntegerType(), pa.int32()),
    (t.INT8, -1, LongType(), pa.int64()),
    (t.OID, -1, LongType(), pa.int64()),
    (t.FLOAT4, -1, FloatType(), pa.float32()),
    (t.FLOAT8, -1, DoubleType(), pa.float64()),
    (t.NUMERIC, numeric(12, 2), DecimalType(12, 2), pa.decimal128(12, 2)),
    (t.NUMERIC, numeric(38, 0), DecimalType(38, 0), pa.decimal128(38, 0)),
    (t.NUMERIC, numeric(39, 2), StringType(), pa.string()),
    (t.NUMERIC, numeric(5, -2), StringType(), pa.string()),
    (t.NUMERIC, numeric(2, 5), StringType(), pa.string()),
    (t.NUMERIC, -1, StringType(), pa.string()),
    (t.TEXT, -1, StringType(), pa.string()),
    (t.VARCHAR, 14, StringType(), pa.string()),
    (t.BPCHAR, 9, StringType(), pa.string()),
    (t.NAME, -1, StringType(), pa.string()),
    (t.CHAR, -1, StringType(), pa.string()),
    (t.BYTEA, -1, BinaryType(), pa.binary()),
    (t.DATE, -1, DateType(), pa.date32()),
    (t.TIME, -1, TimeType(), pa.time64("us")),
    (t.TIMESTAMP, -1, TimestampType(), pa.timestamp("us")),
    (t.TIMESTAMPTZ, -1, TimestamptzType(), pa.timestamp("us", tz="UTC")),
    (t.UUID, -1, StringType(), pa.string()),
    (114, -1, StringType(), pa.string()),  # json
    (3802, -1, StringType(), pa.string()),  # jsonb
    (1186, -1, StringType(), pa.string()),  # interval
    (1007, -1, StringType(), pa.string()),  # int4[]
    (1266, -1, StringType(), pa.string()),  # timetz
    (987_654, -1, StringType(), pa.string()),  # an enum or any unknown type
]


@pytest.mark.parametrize(("oid", "modifier", "iceberg", "arrow"), MAPPING)
def test_type_mapping(oid: int, modifier: int, iceberg: Any, arrow: pa.DataType) -> None:
    ctype = column_type(col(oid, modifier))
    assert ctype.iceberg == iceberg
    assert ctype.arrow == arrow


def test_numeric_typmod() -> None:
    assert numeric_precision_scale(-1) is None
    assert numeric_precision_scale(numeric(12, 2)) == (12, 2)
    assert numeric_precision_scale(numeric(5, -2)) == (5, -2)
    assert numeric_precision_scale(numeric(1000, 0)) == (1000, 0)


# (type oid, modifier, Postgres text form, expected Python value of the Arrow cell)
VALUES: list[tuple[int, int, bytes | None, Any]] = [
    (t.BOOL, -1, b"t", True),
    (t.BOOL, -1, b"f", False),
    (t.BOOL, -1, None, None),
    (t.INT2, -1, b"-32768", -32768),
    (t.INT4, -1, b"2147483647", 2147483647),
    (t.INT8, -1, b"-9223372036854775808", -9223372036854775808),
    (t.INT8, -1, None, None),
    (t.OID, -1, b"4294967295", 4294967295),
    (t.FLOAT4, -1, b"1.5", 1.5),
    (t.FLOAT4, -1, b"-Infinity", -math.inf),
    (t.FLOAT8, -1, b"0.1", 0.1),
    (t.FLOAT8, -1, b"1e+300", 1e300),
    (t.FLOAT8, -1, b"-1.7976931348623157e+308", -1.7976931348623157e308),
    (t.FLOAT8, -1, b"Infinity", math.inf),
    (t.FLOAT8, -1, b"-Infinity", -math.inf),
    (t.FLOAT8, -1, b"-0", -0.0),
    (t.NUMERIC, numeric(12, 2), b"1234567890.12", Decimal("1234567890.12")),
    (t.NUMERIC, numeric(12, 2), b"-0.01", Decimal("-0.01")),
    (t.NUMERIC, numeric(12, 2), b"0.00", Decimal("0.00")),
    (t.NUMERIC, numeric(38, 0), b"-" + b"9" * 38, Decimal("-" + "9" * 38)),
    (
        t.NUMERIC,
        numeric(38, 10),
        b"1234567890123456789012345678.0123456789",
        Decimal("1234567890123456789012345678.0123456789"),
    ),
    (t.NUMERIC, -1, b"NaN", "NaN"),
    (
        t.NUMERIC,
        -1,
        b"-12345678901234567890123456789012345678901234.5",
        "-12345678901234567890123456789012345678901234.5",
    ),
    (t.NUMERIC, -1, b"Infinity", "Infinity"),
    (t.TEXT, -1, "héllo ✓".encode(), "héllo ✓"),
    (t.TEXT, -1, b"", ""),
    (t.TEXT, -1, None, None),
    (t.VARCHAR, 14, b"a\tb\nc", "a\tb\nc"),
    (t.BPCHAR, 9, b"ab   ", "ab   "),
    (t.UUID, -1, b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    (3802, -1, b'{"a": [1, 2]}', '{"a": [1, 2]}'),
    (1007, -1, b"{1,2,NULL}", "{1,2,NULL}"),
    (t.BYTEA, -1, b"\\xdeadbeef00", b"\xde\xad\xbe\xef\x00"),
    (t.BYTEA, -1, b"\\x", b""),
    (t.BYTEA, -1, b"a\\\\b\\000", b"a\\b\x00"),  # bytea_output=escape
    (t.DATE, -1, b"2024-02-29", dt.date(2024, 2, 29)),
    (t.DATE, -1, b"0001-01-01", dt.date(1, 1, 1)),
    (t.DATE, -1, b"9999-12-31", dt.date(9999, 12, 31)),
    (t.TIME, -1, b"00:00:00", dt.time(0, 0)),
    (t.TIME, -1, b"23:59:59.999999", dt.time(23, 59, 59, 999999)),
    (t.TIME, -1, b"12:30:00.5", dt.time(12, 30, 0, 500000)),
    (t.TIMESTAMP, -1, b"2024-01-02 03:04:05", dt.datetime(2024, 1, 2, 3, 4, 5)),
    (t.TIMESTAMP, -1, b"2024-01-02 03:04:05.000001", dt.datetime(2024, 1, 2, 3, 4, 5, 1)),
    (t.TIMESTAMP, -1, b"1900-01-01 00:00:00.12", dt.datetime(1900, 1, 1, 0, 0, 0, 120000)),
    (t.TIMESTAMPTZ, -1, b"2024-01-02 03:04:05+00", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    (
        t.TIMESTAMPTZ,
        -1,
        b"2024-01-02 03:04:05.123456+05:30",
        dt.datetime(2024, 1, 1, 21, 34, 5, 123456, tzinfo=UTC),
    ),
    (
        t.TIMESTAMPTZ,
        -1,
        b"2024-01-02 03:04:05.5-08",
        dt.datetime(2024, 1, 2, 11, 4, 5, 500000, tzinfo=UTC),
    ),
    (
        t.TIMESTAMPTZ,
        -1,
        b"1900-01-01 00:00:00+00:19:32",
        dt.datetime(1899, 12, 31, 23, 40, 28, tzinfo=UTC),
    ),  # historical offset with seconds
    (t.TIMESTAMPTZ, -1, None, None),
]


@pytest.mark.parametrize(("oid", "modifier", "text", "expected"), VALUES)
def test_value(oid: int, modifier: int, text: bytes | None, expected: Any) -> None:
    ctype = column_type(col(oid, modifier))
    array, mask = convert_column([text], ctype)
    assert mask is None
    assert array.type == ctype.arrow
    got = array.to_pylist()[0]
    assert got == expected
    if isinstance(expected, float) and expected == 0:
        assert math.copysign(1, got) == math.copysign(1, expected)


def test_float_nan() -> None:
    for oid in (t.FLOAT4, t.FLOAT8):
        array, _ = convert_column([b"NaN", None], column_type(col(oid)))
        got = array.to_pylist()
        assert math.isnan(got[0]) and got[1] is None


def test_float4_keeps_the_float32_value() -> None:
    array, _ = convert_column([b"0.1", b"3.4028235e+38"], column_type(col(t.FLOAT4)))
    assert array.to_pylist() == pa.array([0.1, 3.4028235e38], pa.float32()).to_pylist()


# Values Arrow cannot parse that are still exact in Iceberg: converted in Python.
STORAGE: list[tuple[int, bytes, int]] = [
    (t.DATE, b"0044-03-15 BC", -735_160),  # days since 1970-01-01, proleptic Gregorian
    (t.DATE, b"10000-01-01", 2_932_897),
    (t.TIMESTAMP, b"0001-01-01 00:00:00 BC", -62_167_219_200_000_000),
    (t.TIMESTAMP, b"10000-01-01 00:00:00.5", 253_402_300_800_500_000),
    (t.TIMESTAMPTZ, b"0044-03-15 12:00:00+00:19:32 BC", -63_517_781_972_000_000),
]


@pytest.mark.parametrize(("oid", "text", "micros_or_days"), STORAGE)
def test_extended_dates(oid: int, text: bytes, micros_or_days: int) -> None:
    array, _ = convert_column([text, None], column_type(col(oid)))
    storage = pa.int32() if oid == t.DATE else pa.int64()
    assert array.view(storage).to_pylist() == [micros_or_days, None]


def test_extended_dates_match_python_where_python_can() -> None:
    ctype = column_type(col(t.TIMESTAMP))
    mixed, _ = convert_column([b"2024-01-02 03:04:05", b"0001-01-01 00:00:00 BC"], ctype)
    plain, _ = convert_column([b"2024-01-02 03:04:05"], ctype)
    assert mixed[0] == plain[0]
    epoch, _ = convert_column([b"0001-01-01 00:00:00"], ctype)
    assert epoch.view(pa.int64())[0].as_py() == -62_135_596_800_000_000


INFINITE: list[tuple[int, bytes, int]] = [
    (t.DATE, b"infinity", 2**31 - 1),
    (t.DATE, b"-infinity", -(2**31 - 1)),
    (t.TIMESTAMP, b"infinity", 2**63 - 1),
    (t.TIMESTAMP, b"-infinity", -(2**63 - 1)),
    (t.TIMESTAMPTZ, b"infinity", 2**63 - 1),
    (t.TIMESTAMPTZ, b"-infinity", -(2**63 - 1)),
    (t.TIME, b"24:00:00", 86_400_000_000),
]


@pytest.mark.parametrize(("oid", "text", "stored"), INFINITE)
def test_infinities_and_midnight_are_stored_as_duckdb_does(
    oid: int, text: bytes, stored: int
) -> None:
    ctype = column_type(col(oid))
    array, _ = convert_column([text, None], ctype)
    assert array.type == ctype.arrow
    width = pa.int32() if oid == t.DATE else pa.int64()
    assert array.view(width).to_pylist() == [stored, None]


UNREPRESENTABLE: list[tuple[int, int, bytes]] = [
    (t.NUMERIC, numeric(12, 2), b"NaN"),
    (t.TIMESTAMP, -1, b"294276-12-31 23:59:59.999999"),  # Postgres' last timestamp
    (t.TIMESTAMPTZ, -1, b"294270-01-01 00:00:00+00"),
    (t.TIME, -1, b"24:00:00.000001"),
    (t.TIMESTAMP, -1, b"01/02/2024 03:04:05"),  # DateStyle not ISO
    (t.BOOL, -1, b"yes"),
    (t.BYTEA, -1, b"\\xzz"),
]


@pytest.mark.parametrize(("oid", "modifier", "text"), UNREPRESENTABLE)
def test_unrepresentable_values_raise(oid: int, modifier: int, text: bytes) -> None:
    ctype = column_type(col(oid, modifier))
    with pytest.raises(SchemaError) as info:
        convert_column([b"t" if oid == t.BOOL else None, text], ctype, where="public.orders.c")
    message = str(info.value)
    assert "public.orders.c" in message
    assert repr(text.decode()) in message
    assert "STREAMBED_EXCLUDE_TABLES" in message
    assert info.value.kind is Kind.UNSUPPORTED_SCHEMA


def test_invalid_utf8_raises() -> None:
    with pytest.raises(SchemaError, match="client_encoding"):
        convert_column([b"\xff\xfe"], column_type(col(t.TEXT)), where="s.t.c")


def test_binary_format_value_raises() -> None:
    with pytest.raises(StreambedError) as info:
        convert_column([Binary(b"\x00")], column_type(col(t.INT4)))
    assert info.value.kind is Kind.PROTOCOL


RELATION = Relation(
    relation_id=42,
    namespace="public",
    name="orders",
    replica_identity="d",
    columns=(
        col(t.INT8, name="id", flags=1),
        col(t.TEXT, name="note"),
        col(t.NUMERIC, numeric(12, 2), name="amount"),
        col(t.TIMESTAMPTZ, name="at"),
    ),
)
KEY = TableKey(columns=(0,))


def test_rows_to_arrow_with_unchanged() -> None:
    rows: list[tuple[TupleValue, ...]] = [
        (b"1", b"first", b"10.50", b"2024-01-01 00:00:00+00"),
        (b"2", UNCHANGED, None, b"2024-01-01 00:00:00+01"),
        (b"3", UNCHANGED, b"-1.00", None),
    ]
    converted = rows_to_arrow(RELATION, rows)
    assert converted.table.column_names == ["id", "note", "amount", "at"]
    assert converted.table.to_pylist()[1] == {
        "id": 2,
        "note": None,
        "amount": None,
        "at": dt.datetime(2023, 12, 31, 23, 0, tzinfo=UTC),
    }
    assert list(converted.unchanged) == ["note"]
    assert converted.unchanged["note"].to_pylist() == [False, True, True]


def test_rows_to_arrow_empty_and_target_schema() -> None:
    target = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"}),
            pa.field("note", pa.large_string(), metadata={b"PARQUET:field_id": b"2"}),
            pa.field("amount", pa.decimal128(12, 2), metadata={b"PARQUET:field_id": b"3"}),
            pa.field("at", pa.timestamp("us", tz="UTC"), metadata={b"PARQUET:field_id": b"4"}),
        ]
    )
    empty = rows_to_arrow(RELATION, [], target)
    assert empty.table.num_rows == 0 and empty.table.schema == target
    one = rows_to_arrow(RELATION, [(b"7", b"x", b"1.00", None)], target).table
    assert one.schema == target
    assert one.schema.field("id").metadata == {b"PARQUET:field_id": b"1"}


def test_keys_to_arrow() -> None:
    keys = keys_to_arrow(RELATION, KEY, [(b"5",), (b"6",)])
    assert keys.column_names == ["id"]
    assert keys.column("id").to_pylist() == [5, 6]
    with pytest.raises(StreambedError) as info:
        keys_to_arrow(RELATION, KEY, [(UNCHANGED,)])
    assert info.value.kind is Kind.PROTOCOL


def test_keys_to_arrow_full_row_identity() -> None:
    full = TableKey(columns=(), full_row=True)
    keys = keys_to_arrow(RELATION, full, [(b"1", b"n", None, None)])
    assert keys.column_names == ["id", "note", "amount", "at"]


def test_wrong_width_is_a_protocol_error() -> None:
    with pytest.raises(StreambedError) as info:
        rows_to_arrow(RELATION, [(b"1", b"x")])
    assert info.value.kind is Kind.PROTOCOL


@settings(max_examples=300, deadline=None)
@given(
    moment=st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    offset_minutes=st.integers(min_value=-15 * 60, max_value=15 * 60),
)
def test_python_fallback_agrees_with_arrow(moment: dt.datetime, offset_minutes: int) -> None:
    """The per-value fallback and the vectorized cast give the same instant."""
    sign = "+" if offset_minutes >= 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    day_text = f"{moment.year:04d}-{moment:%m-%d}"  # %Y does not pad years below 1000
    text = f"{day_text} {moment:%H:%M:%S}.{moment.microsecond:06d}{sign}{hours:02d}:{minutes:02d}"
    ctype = column_type(col(t.TIMESTAMPTZ))
    vectorized, _ = convert_column([text.encode()], ctype)
    # a BC value in the same column forces the whole column through the Python fallback
    fallback, _ = convert_column([text.encode(), b"0001-01-01 00:00:00+00 BC"], ctype)
    assert vectorized.view(pa.int64())[0] == fallback.view(pa.int64())[0]
    date_ctype = column_type(col(t.DATE))
    day, _ = convert_column([day_text.encode(), b"0001-01-01 BC"], date_ctype)
    assert day.view(pa.int32())[0].as_py() == (moment.date() - dt.date(1970, 1, 1)).days
