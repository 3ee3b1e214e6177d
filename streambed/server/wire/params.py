"""Bind parameters: wire bytes + type OID + format code -> the Python value DuckDB binds.

Typed parameters decode exactly as Postgres reads them (text input syntax or binary send
format). A parameter whose OID is 0 ("unspecified", what psycopg sends for `str` and pgjdbc
for `setObject` strings) stays a `str`: DuckDB casts it from the parameter's usage
(`id = $1` binds as the column's type). Where the usage leaves the type open (`$1 + 1`),
`infer_untyped` gives the literal's natural type so the handler can retry the statement once.
"""

from __future__ import annotations

import datetime
import re
import struct
import uuid
import zoneinfo
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation, localcontext

BOOL = 16
BYTEA = 17
CHAR = 18
NAME = 19
INT8 = 20
INT2 = 21
INT4 = 23
TEXT = 25
OID = 26
JSON = 114
FLOAT4 = 700
FLOAT8 = 701
UNKNOWN = 705
BPCHAR = 1042
VARCHAR = 1043
DATE = 1082
TIME = 1083
TIMESTAMP = 1114
TIMESTAMPTZ = 1184
NUMERIC = 1700
UUID = 2950
JSONB = 3802
UNSPECIFIED = 0

ParamValue = (
    None
    | bool
    | int
    | float
    | Decimal
    | str
    | bytes
    | datetime.date
    | datetime.datetime
    | datetime.time
    | uuid.UUID
)

_EPOCH_DATE = datetime.date(2000, 1, 1)
_EPOCH = datetime.datetime(2000, 1, 1)
_EPOCH_UTC = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
_TRUE = frozenset({"t", "true", "y", "yes", "on", "1"})
_FALSE = frozenset({"f", "false", "n", "no", "off", "0"})
_INTEGER = re.compile(r"^[+-]?\d+$")
_DECIMAL = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
_SHORT_OFFSET = re.compile(r"([+-]\d\d)$")  # "+02" -> "+02:00" for fromisoformat
_INT_RANGE = {INT2: 2**15, INT4: 2**31, INT8: 2**63}


class ParamError(Exception):
    """A parameter value cannot be read as its declared type."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def _type_name(oid: int) -> str:
    return _NAMES.get(oid, f"oid {oid}")


def _invalid(oid: int, text: str) -> ParamError:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return ParamError("22P02", f'invalid input syntax for type {_type_name(oid)}: "{shown}"')


def _text_bool(oid: int, s: str) -> ParamValue:
    v = s.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise _invalid(oid, s)


def _text_int(oid: int, s: str) -> ParamValue:
    if not _INTEGER.match(s.strip()):
        raise _invalid(oid, s)
    value = int(s)
    bound = _INT_RANGE.get(oid, 2**63)
    if not -bound <= value < bound:
        raise ParamError("22003", f'value "{s}" is out of range for type {_type_name(oid)}')
    return value


def _text_numeric(oid: int, s: str) -> ParamValue:
    try:
        return Decimal(s.strip())
    except InvalidOperation as e:
        raise _invalid(oid, s) from e


def _text_float(oid: int, s: str) -> ParamValue:
    try:
        return float(s)
    except ValueError as e:
        raise _invalid(oid, s) from e


def _text_date(oid: int, s: str) -> ParamValue:
    v = s.strip()
    if v.lower() in ("infinity", "-infinity"):
        return v  # DuckDB casts the special value itself
    try:
        return datetime.date.fromisoformat(v)
    except ValueError as e:
        raise ParamError("22007", f'invalid input syntax for type date: "{s}"') from e


def _iso_datetime(oid: int, s: str) -> datetime.datetime:
    v = _SHORT_OFFSET.sub(r"\1:00", s.strip())
    try:
        return datetime.datetime.fromisoformat(v)
    except ValueError as e:
        raise ParamError("22007", f'invalid input syntax for type {_type_name(oid)}: "{s}"') from e


def _text_time(oid: int, s: str) -> ParamValue:
    try:
        return datetime.time.fromisoformat(s.strip())
    except ValueError as e:
        raise ParamError("22007", f'invalid input syntax for type time: "{s}"') from e


def _text_uuid(oid: int, s: str) -> ParamValue:
    try:
        return uuid.UUID(s.strip())
    except ValueError as e:
        raise _invalid(oid, s) from e


def _text_bytea(oid: int, s: str) -> ParamValue:
    if s.startswith("\\x"):
        try:
            return bytes.fromhex(s[2:])
        except ValueError as e:
            raise _invalid(oid, s) from e
    out = bytearray()
    i = 0
    while i < len(s):
        ch = s[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
        elif s[i + 1 : i + 2] == "\\":
            out.append(0x5C)
            i += 2
        elif re.match(r"[0-3][0-7][0-7]", s[i + 1 : i + 4]):
            out.append(int(s[i + 1 : i + 4], 8))
            i += 4
        else:
            raise _invalid(oid, s)
    return bytes(out)


_TEXT_DECODERS: dict[int, Callable[[int, str], ParamValue]] = {
    BOOL: _text_bool,
    INT2: _text_int,
    INT4: _text_int,
    INT8: _text_int,
    OID: _text_int,
    NUMERIC: _text_numeric,
    FLOAT4: _text_float,
    FLOAT8: _text_float,
    DATE: _text_date,
    TIME: _text_time,
    UUID: _text_uuid,
    BYTEA: _text_bytea,
}


def _unpack(fmt: str, oid: int, raw: bytes) -> int | float:
    try:
        value: int | float = struct.unpack(fmt, raw)[0]
    except struct.error as e:
        raise ParamError(
            "22P03", f"incorrect binary data format in bind parameter of type {_type_name(oid)}"
        ) from e
    return value


def _int(fmt: str, oid: int, raw: bytes) -> int:
    return int(_unpack(fmt, oid, raw))


def _binary_numeric(oid: int, raw: bytes) -> ParamValue:
    if len(raw) < 8:
        raise ParamError("22P03", "insufficient data left in message for numeric parameter")
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHH", raw)
    if ndigits < 0 or len(raw) != 8 + 2 * ndigits:
        raise ParamError("22P03", "incorrect binary data format in numeric parameter")
    if sign == 0xC000:
        return Decimal("NaN")
    if sign == 0xD000:
        return Decimal("Infinity")
    if sign == 0xF000:
        return Decimal("-Infinity")
    digits = struct.unpack_from(f"!{ndigits}H", raw, 8)
    value = 0
    for d in digits:
        value = value * 10000 + d
    exponent = 4 * (weight - ndigits + 1)
    with localcontext() as context:
        context.prec = 4 * ndigits + abs(exponent) + dscale + 8
        result = Decimal(value).scaleb(exponent).quantize(Decimal(1).scaleb(-dscale))
        return -result if sign == 0x4000 else result


def _binary(oid: int, raw: bytes, tz: datetime.tzinfo) -> ParamValue:
    if oid == BOOL:
        return bool(_unpack("!?", oid, raw))
    if oid == INT2:
        return _int("!h", oid, raw)
    if oid in (INT4,):
        return _int("!i", oid, raw)
    if oid == OID:
        return _int("!I", oid, raw)
    if oid == INT8:
        return _int("!q", oid, raw)
    if oid == FLOAT4:
        return float(_unpack("!f", oid, raw))
    if oid == FLOAT8:
        return float(_unpack("!d", oid, raw))
    if oid == NUMERIC:
        return _binary_numeric(oid, raw)
    if oid == DATE:
        days = _int("!i", oid, raw)
        if days == 2**31 - 1:
            return "infinity"
        if days == -(2**31):
            return "-infinity"
        return _EPOCH_DATE + datetime.timedelta(days=days)
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        micros = _int("!q", oid, raw)
        if micros == 2**63 - 1:
            return "infinity"
        if micros == -(2**63):
            return "-infinity"
        base = _EPOCH_UTC if oid == TIMESTAMPTZ else _EPOCH
        return base + datetime.timedelta(microseconds=micros)
    if oid == TIME:
        micros = _int("!q", oid, raw)
        return (datetime.datetime.min + datetime.timedelta(microseconds=micros)).time()
    if oid == UUID:
        if len(raw) != 16:
            raise ParamError("22P03", "incorrect binary data format in uuid parameter")
        return uuid.UUID(bytes=raw)
    if oid == BYTEA:
        return raw
    if oid in (TEXT, VARCHAR, BPCHAR, NAME, CHAR, JSON, UNKNOWN, UNSPECIFIED):
        return _utf8(oid, raw)
    if oid == JSONB:
        return _utf8(oid, raw[1:] if raw[:1] == b"\x01" else raw)
    raise ParamError(
        "0A000", f"binary format is not supported for parameters of type {_type_name(oid)}"
    )


def _utf8(oid: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParamError("22021", f"invalid byte sequence for encoding UTF8 in {oid}") from e


def decode(oid: int, fmt: int, raw: bytes | None, tz: datetime.tzinfo = datetime.UTC) -> ParamValue:
    """Decode one parameter. `tz` is the session TimeZone, applied to a timestamptz given
    without an offset (as Postgres does)."""
    if raw is None:
        return None
    if fmt == 1:
        return _binary(oid, raw, tz)
    text = _utf8(oid, raw)
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        if text.strip().lower() in ("infinity", "-infinity"):
            return text.strip()
        value = _iso_datetime(oid, text)
        if oid == TIMESTAMP:
            return value.replace(tzinfo=None)
        return value if value.tzinfo is not None else value.replace(tzinfo=tz)
    decoder = _TEXT_DECODERS.get(oid)
    return decoder(oid, text) if decoder else text


def decode_all(
    oids: Sequence[int],
    formats: Sequence[int],
    values: Sequence[bytes | None],
    tz: datetime.tzinfo = datetime.UTC,
) -> list[ParamValue]:
    """Decode a Bind message's parameters. Format codes follow the protocol rule: none means
    all text, one applies to all, otherwise one per parameter."""
    if len(formats) not in (0, 1, len(values)):
        raise ParamError(
            "08P01", f"bind message has {len(formats)} parameter formats but {len(values)} values"
        )
    if len(oids) > len(values):
        raise ParamError(
            "08P01",
            f"bind message supplies {len(values)} parameters, "
            f"but prepared statement requires {len(oids)}",
        )
    out: list[ParamValue] = []
    for i, raw in enumerate(values):
        fmt = formats[0] if len(formats) == 1 else (formats[i] if formats else 0)
        oid = oids[i] if i < len(oids) else UNSPECIFIED
        out.append(decode(oid, fmt, raw, tz))
    return out


def infer_untyped(value: ParamValue) -> ParamValue:
    """The natural type of an untyped literal, for statements where DuckDB cannot infer the
    parameter's type from its usage: integers, then decimals, else unchanged."""
    if not isinstance(value, str):
        return value
    v = value.strip()
    if _INTEGER.match(v) and -(2**63) <= int(v) < 2**63:
        return int(v)
    if _DECIMAL.match(v):
        return Decimal(v)
    return value


def timezone(name: str) -> datetime.tzinfo:
    """The tzinfo for a TimeZone setting; UTC when the name is unknown."""
    if name.upper() in ("UTC", "GMT", "Z"):
        return datetime.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return datetime.UTC


_NAMES = {
    BOOL: "boolean",
    BYTEA: "bytea",
    CHAR: '"char"',
    NAME: "name",
    INT8: "bigint",
    INT2: "smallint",
    INT4: "integer",
    TEXT: "text",
    OID: "oid",
    JSON: "json",
    FLOAT4: "real",
    FLOAT8: "double precision",
    UNKNOWN: "unknown",
    BPCHAR: "character",
    VARCHAR: "character varying",
    DATE: "date",
    TIME: "time without time zone",
    TIMESTAMP: "timestamp without time zone",
    TIMESTAMPTZ: "timestamp with time zone",
    NUMERIC: "numeric",
    UUID: "uuid",
    JSONB: "jsonb",
    UNSPECIFIED: "unknown",
}
