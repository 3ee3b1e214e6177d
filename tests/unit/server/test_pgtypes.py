"""Type mapping and text encoders. Expected strings are what Postgres 15 printed for the same
values (psql -At against a real Postgres 15: SELECT 1e15::float8, ..., see the test names)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from streambed.server import pgtypes
from streambed.server.pgtypes import encode_text_column, pg_type_for_duckdb


@pytest.mark.parametrize(
    ("duckdb_type", "oid", "typmod", "name"),
    [
        ("BOOLEAN", 16, -1, "bool"),
        ("SMALLINT", 21, -1, "int2"),
        ("INTEGER", 23, -1, "int4"),
        ("BIGINT", 20, -1, "int8"),
        ("FLOAT", 700, -1, "float4"),
        ("DOUBLE", 701, -1, "float8"),
        ("DECIMAL(10,2)", 1700, (10 << 16 | 2) + 4, "numeric"),
        ("VARCHAR", 25, -1, "text"),
        ("BLOB", 17, -1, "bytea"),
        ("DATE", 1082, -1, "date"),
        ("TIME", 1083, -1, "time"),
        ("TIMESTAMP", 1114, -1, "timestamp"),
        ("TIMESTAMP WITH TIME ZONE", 1184, -1, "timestamptz"),
        ("INTERVAL", 1186, -1, "interval"),
        ("UUID", 2950, -1, "uuid"),
        ("JSON", 114, -1, "json"),
        ("HUGEINT", 1700, -1, "numeric"),
        ("UHUGEINT", 1700, -1, "numeric"),
        ("INTEGER[]", 1007, -1, "_int4"),
        ("BIGINT[]", 1016, -1, "_int8"),
        ("VARCHAR[]", 1009, -1, "_text"),
        ("DOUBLE[]", 1022, -1, "_float8"),
        ("DECIMAL(5,1)[]", 1231, (5 << 16 | 1) + 4, "_numeric"),
        ("BOOLEAN[]", 1000, -1, "_bool"),
        ("DATE[]", 1182, -1, "_date"),
        ("TIMESTAMP[]", 1115, -1, "_timestamp"),
        ("TIMESTAMP WITH TIME ZONE[]", 1185, -1, "_timestamptz"),
        ("UUID[]", 2951, -1, "_uuid"),
        ("STRUCT(a INTEGER)", 25, -1, "text"),
    ],
)
def test_type_mapping(duckdb_type: str, oid: int, typmod: int, name: str) -> None:
    pg = pg_type_for_duckdb(duckdb_type)
    assert (pg.oid, pg.typmod, pg.name) == (oid, typmod, name)


def test_format_type() -> None:
    assert pg_type_for_duckdb("DECIMAL(10,2)").format_type() == "numeric(10,2)"
    assert pg_type_for_duckdb("TIMESTAMP WITH TIME ZONE").format_type() == (
        "timestamp with time zone"
    )
    assert pg_type_for_duckdb("INTEGER[]").format_type() == "integer[]"


def enc(array: pa.Array, duckdb_type: str, tz: str = "UTC") -> list[str | None]:
    out = encode_text_column(array, pg_type_for_duckdb(duckdb_type), tz)
    return [None if v is None else v.decode() for v in out]


def test_float8_like_postgres() -> None:
    values = [1e15, 1e16, 123456789012345.0, 0.0001, 0.00001, 1.5e-7, float("inf"),
              float("nan"), -0.0, 0.1, None]  # fmt: skip
    assert enc(pa.array(values, pa.float64()), "DOUBLE") == [
        "1e+15", "1e+16", "123456789012345", "0.0001", "1e-05", "1.5e-07", "Infinity", "NaN",
        "-0", "0.1", None,
    ]  # fmt: skip


def test_float4_like_postgres() -> None:
    values = pa.array([1e6, 1e5, 0.1, 123456.7], pa.float32())
    assert enc(values, "FLOAT") == ["1e+06", "100000", "0.1", "123456.7"]


def test_timestamptz_in_session_zone() -> None:
    values = pa.array(
        [dt.datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=dt.UTC),
         dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), None],
        pa.timestamp("us", "UTC"),
    )  # fmt: skip
    assert enc(values, "TIMESTAMP WITH TIME ZONE", "Asia/Kolkata") == [
        "2024-01-02 08:34:05.12+05:30", "2024-01-02 08:34:05+05:30", None,
    ]  # fmt: skip
    assert enc(values, "TIMESTAMP WITH TIME ZONE")[:2] == [
        "2024-01-02 03:04:05.12+00", "2024-01-02 03:04:05+00",
    ]  # fmt: skip


def test_scalars_like_postgres() -> None:
    assert enc(pa.array([True, False, None]), "BOOLEAN") == ["t", "f", None]
    assert enc(pa.array([decimal.Decimal("1.50")], pa.decimal128(10, 2)), "DECIMAL(10,2)") == [
        "1.50"
    ]
    assert enc(pa.array([b"\x01\x02"]), "BLOB") == ["\\x0102"]
    assert enc(pa.array([dt.time(3, 4, 5, 100000)]), "TIME") == ["03:04:05.1"]
    assert enc(pa.array([dt.datetime(2024, 1, 2, 3, 4, 10)]), "TIMESTAMP") == [
        "2024-01-02 03:04:10"
    ]
    assert enc(pa.array([dt.date(2024, 1, 2)]), "DATE") == ["2024-01-02"]


def test_arrays_like_postgres() -> None:
    assert enc(pa.array([[1, None], None]), "INTEGER[]") == ["{1,NULL}", None]
    texts = pa.array([["a b", 'x"y', None, "", "NULL"]])
    assert enc(texts, "VARCHAR[]") == ['{"a b","x\\"y",NULL,"","NULL"}']
    assert enc(pa.array([[[1, 2], [3, 4]]]), "INTEGER[][]") == ["{{1,2},{3,4}}"]


@pytest.mark.parametrize(
    ("months", "days", "nanos", "text"),
    [
        (14, 3, (4 * 3600 + 5 * 60 + 6) * 10**9 + 500_000_000, "1 year 2 mons 3 days 04:05:06.5"),
        (0, 0, 0, "00:00:00"),
        (-3, 0, 0, "-3 mons"),
        (0, 0, 25 * 3600 * 10**9, "25:00:00"),
    ],
)
def test_interval_like_postgres(months: int, days: int, nanos: int, text: str) -> None:
    assert pgtypes.format_interval(months, days, nanos) == text


def test_timestamptz_follows_the_zone_after_2037_and_on_the_half_hour() -> None:
    # Arrow's zone rules end in 2037; Postgres extends the last rule (DST in 2066). St.
    # John's changes offset at 02:00 local, half past a UTC hour. Expected: Postgres 15.
    moment = dt.datetime(2066, 3, 14, 5, 48, 22, 21066, tzinfo=dt.UTC)
    array = pa.array([moment, moment - dt.timedelta(hours=1)], pa.timestamp("us", "UTC"))
    assert pgtypes.encode_text_column(array, pgtypes.TIMESTAMPTZ, "America/St_Johns") == [
        b"2066-03-14 03:18:22.021066-02:30",
        b"2066-03-14 01:18:22.021066-03:30",
    ]
    paris = pa.array([dt.datetime(1909, 7, 3, 0, 24, 2, tzinfo=dt.UTC)], pa.timestamp("us", "UTC"))
    assert pgtypes.encode_text_column(paris, pgtypes.TIMESTAMPTZ, "Europe/Paris") == [
        b"1909-07-03 00:33:23+00:09:21"
    ]


def test_float_notation_like_postgres() -> None:
    values = [0.0, -0.0, 1e14, 1e15, 1e-4, 9.9e-5, 0.1 + 0.2, float("inf"), float("nan"), None]
    assert pgtypes.encode_text_column(pa.array(values), pgtypes.FLOAT8) == [
        b"0", b"-0", b"100000000000000", b"1e+15", b"0.0001", b"9.9e-05",
        b"0.30000000000000004", b"Infinity", b"NaN", None,
    ]  # fmt: skip
    single = pa.array([123456.7, 1234567.0, 1.5e-5], pa.float32())
    assert pgtypes.encode_text_column(single, pgtypes.FLOAT4) == [
        b"123456.7", b"1.234567e+06", b"1.5e-05",
    ]  # fmt: skip
