"""ServerOptions from the environment, and the result encoders' wire bytes."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.core.config import Settings
from streambed.core.errors import ConfigError
from streambed.server import pgtypes
from streambed.server.database import DatabaseSettings
from streambed.server.wire import params, results
from streambed.server.wire.auth import make_verifier
from streambed.server.wire.server import ServerOptions
from streambed.server.wire.tls import TlsMode

URL = "postgresql://app:pw@db:5432/shop"


def _options(env: dict[str, str]) -> ServerOptions:
    return ServerOptions.from_settings(Settings.from_env({"STREAMBED_SOURCE_URL": URL, **env}))


def test_options_defaults() -> None:
    options = _options({})
    assert (options.host, options.port, options.tls) == ("127.0.0.1", 5433, TlsMode.OFF)
    assert not options.user_store().enabled
    assert (
        DatabaseSettings.from_settings(
            Settings.from_env({"STREAMBED_SOURCE_URL": URL})
        ).statement_timeout
        == 0.0
    )


def test_options_from_settings(tmp_path: Path) -> None:
    cert, key, users = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "users"
    cert.write_text("x")
    key.write_text("x")
    users.write_text(f"carol:{make_verifier('pw')}\n")
    env = {
        "STREAMBED_QUERY_LISTEN": "0.0.0.0:6543",
        "STREAMBED_QUERY_USERS": "alice:secret",
        "STREAMBED_QUERY_USERS_FILE": str(users),
        "STREAMBED_QUERY_TLS_CERT": str(cert),
        "STREAMBED_QUERY_TLS_KEY": str(key),
        "STREAMBED_QUERY_MAX_CONNECTIONS": "7",
        "STREAMBED_QUERY_STATEMENT_TIMEOUT": "2.5",
        "STREAMBED_QUERY_MAX_MESSAGE_BYTES": "4096",
        "STREAMBED_QUERY_MAX_PENDING_CONNECTIONS": "5",
        "STREAMBED_QUERY_AUTH_TIMEOUT": "12.5",
    }
    options = _options(env)
    assert (options.host, options.port, options.tls) == ("0.0.0.0", 6543, TlsMode.ON)
    assert (options.max_connections, options.max_message_bytes) == (7, 4096)
    assert (options.max_pending, options.auth_timeout) == (5, 12.5)
    assert len(options.user_store()) == 2
    assert "secret" not in repr(options)
    settings = Settings.from_env({"STREAMBED_SOURCE_URL": URL, **env})
    # one statement timeout: the sessions' default, which a session may SET
    assert DatabaseSettings.from_settings(settings).statement_timeout == 2.5
    assert _options({**env, "STREAMBED_QUERY_TLS": "require"}).tls is TlsMode.REQUIRE


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STREAMBED_QUERY_TLS": "require"}, "needs STREAMBED_QUERY_TLS_CERT"),
        ({"STREAMBED_QUERY_TLS": "maybe"}, "use off, on or require"),
        ({"STREAMBED_QUERY_MAX_CONNECTIONS": "lots"}, "STREAMBED_QUERY_MAX_CONNECTIONS='lots'"),
        ({"STREAMBED_QUERY_MAX_CONNECTIONS": "0"}, "must be at least 1"),
        ({"STREAMBED_QUERY_STATEMENT_TIMEOUT": "-1"}, "STREAMBED_QUERY_STATEMENT_TIMEOUT=-1"),
        ({"STREAMBED_QUERY_MAX_MESSAGE_BYTES": "10"}, "at least 1024"),
        (
            {"STREAMBED_QUERY_MAX_PENDING_CONNECTIONS": "0"},
            "STREAMBED_QUERY_MAX_PENDING_CONNECTIONS=0 must be at least 1",
        ),
        ({"STREAMBED_QUERY_AUTH_TIMEOUT": "0"}, "STREAMBED_QUERY_AUTH_TIMEOUT=0.0 must be between"),
        ({"STREAMBED_QUERY_AUTH_TIMEOUT": "601"}, "between 1 and 600 seconds"),
        ({"STREAMBED_QUERY_AUTH_TIMEOUT": "nan"}, "between 1 and 600 seconds"),
        ({"STREAMBED_QUERY_AUTH_TIMEOUT": "soon"}, "STREAMBED_QUERY_AUTH_TIMEOUT='soon'"),
        ({"STREAMBED_QUERY_LISTEN": "nohost"}, "host:port"),
        ({"STREAMBED_QUERY_USERS_FILE": "/nonexistent"}, "no such file"),
        ({"STREAMBED_QUERY_TLS_CERT": "/nonexistent"}, "set both"),
        ({"STREAMBED_QUERY_USERS": "justaname"}, "user:password"),
    ],
)
def test_options_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        _options(env)
    assert "justaname" not in str(info.value)  # a users value is a secret


def test_bad_users_file_is_a_config_error(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("carol:not-a-verifier\n")
    with pytest.raises(ConfigError, match="STREAMBED_QUERY_USERS_FILE"):
        _options({"STREAMBED_QUERY_USERS_FILE": str(users)})


def _fields(pg_type: pgtypes.PgType, array: pa.Array) -> list[bytes | None]:
    encoder = results.binary_encoder(pg_type)
    assert encoder is not None
    out: list[bytes | None] = []
    for field in encoder(array):
        (n,) = struct.unpack("!i", field[:4])
        out.append(None if n == -1 else field[4:])
        assert n == -1 or n == len(field) - 4
    return out


def test_binary_encoders() -> None:
    assert _fields(pgtypes.INT4, pa.array([1, None, -2], pa.int32())) == [
        b"\x00\x00\x00\x01",
        None,
        b"\xff\xff\xff\xfe",
    ]
    assert _fields(pgtypes.DATE, pa.array([dt.date(2000, 1, 2)])) == [b"\x00\x00\x00\x01"]
    ts = pa.array([dt.datetime(2000, 1, 1, 0, 0, 1, tzinfo=dt.UTC)], pa.timestamp("us", "UTC"))
    assert _fields(pgtypes.TIMESTAMPTZ, ts) == [struct.pack("!q", 1_000_000)]
    array = pgtypes.array_of(pgtypes.INT8)
    assert _fields(array, pa.array([[1, None], [], None], pa.list_(pa.int64()))) == [
        struct.pack("!iiiiiiq", 1, 1, 20, 2, 1, 8, 1) + b"\xff\xff\xff\xff",
        struct.pack("!iii", 0, 0, 20),
        None,
    ]
    assert _fields(pgtypes.JSONB, pa.array(['{"a":1}'])) == [b'\x01{"a":1}']


def test_unsupported_binary_type_sends_every_column_as_text() -> None:
    specs = results.column_specs([("a", pgtypes.INT4), ("b", pgtypes.TIMETZ)], [1])
    assert [s.format for s in specs] == [0, 0]
    specs = results.column_specs([("a", pgtypes.INT4), ("b", pgtypes.TEXT)], [1, 0])
    assert [s.format for s in specs] == [1, 0]


@given(st.integers(-(10**40), 10**40), st.integers(-30, 10))
def test_numeric_binary_round_trip(digits: int, exponent: int) -> None:
    value = Decimal(f"{digits}E{exponent}")
    decoded = params.decode(params.NUMERIC, 1, results.numeric_binary(value))
    assert decoded == value
    assert isinstance(decoded, Decimal)
    assert decoded.as_tuple().exponent == min(exponent, 0)  # the scale survives


@given(st.integers(-(10**37), 10**37), st.integers(0, 20))
def test_numeric_from_arrow_text_matches_decimal_path(unscaled: int, scale: int) -> None:
    value = Decimal(f"{unscaled}E-{scale}")
    array = pa.array([value], pa.decimal128(38, scale))
    (field,) = _fields(pgtypes.NUMERIC, array)
    assert field == results.numeric_binary(value)


@given(
    st.lists(st.one_of(st.none(), st.integers(-(10**17), 10**17)), min_size=1, max_size=8),
    st.integers(0, 18),
    st.sampled_from([18, 38]),
    st.integers(0, 2),
)
def test_numeric_binary_of_decimal_arrays_with_nulls_and_offsets(
    unscaled: list[int | None], scale: int, precision: int, skip: int
) -> None:
    values = [None if u is None else Decimal(f"{u}E-{scale}") for u in unscaled]
    array = pa.array([None] * skip + values, pa.decimal128(precision, scale)).slice(skip)
    fields = _fields(pgtypes.NUMERIC, array)
    assert fields == [None if v is None else results.numeric_binary(v) for v in values]
