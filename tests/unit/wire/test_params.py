"""Parameter decoding by type OID and format code: one table, text and binary."""

from __future__ import annotations

import datetime
import struct
import uuid
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from streambed.server.wire import params
from streambed.server.wire.params import ParamError, ParamValue
from streambed.server.wire.results import numeric_binary

U = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
UTC = datetime.UTC
PARIS = ZoneInfo("Europe/Paris")

TEXT_CASES: list[tuple[int, bytes, ParamValue]] = [
    (params.TEXT, b"hello", "hello"),
    (params.VARCHAR, "h\u00e9".encode(), "h\u00e9"),
    (params.INT2, b"-32768", -32768),
    (params.INT4, b" 42 ", 42),
    (params.INT8, b"9223372036854775807", 2**63 - 1),
    (params.NUMERIC, b"12.340", Decimal("12.340")),
    (params.NUMERIC, b"NaN", Decimal("NaN")),
    (params.FLOAT4, b"1.5", 1.5),
    (params.FLOAT8, b"-Infinity", float("-inf")),
    (params.BOOL, b"t", True),
    (params.BOOL, b"off", False),
    (params.DATE, b"2024-02-29", datetime.date(2024, 2, 29)),
    (params.DATE, b"infinity", "infinity"),
    (params.TIMESTAMP, b"2024-01-02 03:04:05.5", datetime.datetime(2024, 1, 2, 3, 4, 5, 500000)),
    (params.TIMESTAMP, b"2024-01-02 03:04:05+02", datetime.datetime(2024, 1, 2, 3, 4, 5)),
    (
        params.TIMESTAMPTZ,
        b"2024-01-02 03:04:05+02",
        datetime.datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC),
    ),
    (
        params.TIMESTAMPTZ,
        b"2024-07-01 12:00:00",  # no offset: the session TimeZone (Europe/Paris here)
        datetime.datetime(2024, 7, 1, 10, 0, tzinfo=UTC),
    ),
    (params.TIME, b"03:04:05", datetime.time(3, 4, 5)),
    (params.UUID, str(U).encode(), U),
    (params.BYTEA, b"\\x00ff41", b"\x00\xffA"),
    (params.BYTEA, b"a\\\\b\\001", b"a\\b\x01"),
    (params.UNSPECIFIED, b"2024-01-02", "2024-01-02"),  # left to DuckDB to cast from usage
    (params.JSONB, b'{"a": 1}', '{"a": 1}'),
]

BINARY_CASES: list[tuple[int, bytes, ParamValue]] = [
    (params.TEXT, b"hello", "hello"),
    (params.INT2, struct.pack("!h", -2), -2),
    (params.INT4, struct.pack("!i", 2**31 - 1), 2**31 - 1),
    (params.INT8, struct.pack("!q", -(2**63)), -(2**63)),
    (params.FLOAT4, struct.pack("!f", 0.5), 0.5),
    (params.FLOAT8, struct.pack("!d", 1e300), 1e300),
    (params.BOOL, b"\x01", True),
    (params.DATE, struct.pack("!i", -1), datetime.date(1999, 12, 31)),
    (
        params.TIMESTAMP,
        struct.pack("!q", 1_500_000),
        datetime.datetime(2000, 1, 1, 0, 0, 1, 500000),
    ),
    (params.TIMESTAMPTZ, struct.pack("!q", 0), datetime.datetime(2000, 1, 1, tzinfo=UTC)),
    (params.TIME, struct.pack("!q", 3_600_000_001), datetime.time(1, 0, 0, 1)),
    (params.UUID, U.bytes, U),
    (params.BYTEA, b"\x00\x01", b"\x00\x01"),
    (params.NUMERIC, numeric_binary(Decimal("-1234567.0089")), Decimal("-1234567.0089")),
    (params.NUMERIC, numeric_binary(Decimal("0.00012")), Decimal("0.00012")),
    (params.NUMERIC, numeric_binary(Decimal("100000000")), Decimal("100000000")),
    (params.NUMERIC, numeric_binary(Decimal("0")), Decimal("0")),
    (params.JSONB, b'\x01{"a": 1}', '{"a": 1}'),
]


@pytest.mark.parametrize(("oid", "raw", "expected"), TEXT_CASES)
def test_text_format(oid: int, raw: bytes, expected: ParamValue) -> None:
    value = params.decode(oid, 0, raw, PARIS)
    if isinstance(expected, float) or not isinstance(expected, Decimal):
        assert value == expected
    assert type(value) is type(expected)
    if isinstance(expected, Decimal) and not expected.is_nan():
        assert value == expected and str(value) == str(expected)


@pytest.mark.parametrize(("oid", "raw", "expected"), BINARY_CASES)
def test_binary_format(oid: int, raw: bytes, expected: ParamValue) -> None:
    value = params.decode(oid, 1, raw)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("fmt", [0, 1])
def test_null_in_either_format(fmt: int) -> None:
    assert params.decode(params.INT4, fmt, None) is None


@pytest.mark.parametrize(
    ("oid", "fmt", "raw", "sqlstate"),
    [
        (params.INT4, 0, b"12x", "22P02"),
        (params.INT2, 0, b"40000", "22003"),
        (params.BOOL, 0, b"maybe", "22P02"),
        (params.DATE, 0, b"2024-13-01", "22007"),
        (params.TIMESTAMPTZ, 0, b"yesterday-ish", "22007"),
        (params.UUID, 0, b"not-a-uuid", "22P02"),
        (params.NUMERIC, 0, b"1.2.3", "22P02"),
        (params.BYTEA, 0, b"\\q", "22P02"),
        (params.INT4, 1, b"\x00\x01", "22P03"),
        (params.UUID, 1, b"short", "22P03"),
        (params.NUMERIC, 1, b"\x00", "22P03"),
        (1186, 1, b"\x00" * 16, "0A000"),  # interval parameters in binary
        (params.TEXT, 0, b"\xff", "22021"),
    ],
)
def test_bad_values_have_sqlstates(oid: int, fmt: int, raw: bytes, sqlstate: str) -> None:
    with pytest.raises(ParamError) as caught:
        params.decode(oid, fmt, raw)
    assert caught.value.sqlstate == sqlstate


def test_decode_all_applies_format_rules() -> None:
    values = [b"1", struct.pack("!i", 2), None]
    assert params.decode_all([params.INT4] * 3, [0, 1, 0], values) == [1, 2, None]
    assert params.decode_all([params.INT4, params.INT4], [1], [struct.pack("!i", 7)] * 2) == [7, 7]
    assert params.decode_all([], [], [b"x"]) == ["x"]  # more values than declared types
    with pytest.raises(ParamError):
        params.decode_all([params.INT4] * 2, [], [b"1"])
    with pytest.raises(ParamError):
        params.decode_all([], [0, 0], [b"1"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [("4", 4), (" -7 ", -7), ("1.50", Decimal("1.50")), ("abc", "abc"), (None, None), (3, 3)],
)
def test_infer_untyped(value: ParamValue, expected: ParamValue) -> None:
    assert params.infer_untyped(value) == expected


def test_timezone_names() -> None:
    assert params.timezone("UTC") is UTC
    assert params.timezone("Europe/Paris") == PARIS
    assert params.timezone("Not/AZone") is UTC
