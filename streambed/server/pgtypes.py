"""DuckDB/Arrow types as Postgres types, and Postgres text-format encoders.

Shared by the query database (column descriptions, pg_catalog rows) and the wire layer
(RowDescription and DataRow encoding). `pg_type_for_duckdb` maps a DuckDB type string
(``str(cursor.description[i][1])``) to a `PgType`; `encode_text_column` renders a whole Arrow
column the way Postgres 15 renders those values in text format, vectorised with Arrow
compute where the Postgres rendering allows it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class PgType:
    """A Postgres type as a client sees it in a RowDescription."""

    oid: int
    name: str  # pg_type.typname, e.g. "int4", "_text"
    typlen: int  # -1 for variable length
    typmod: int = -1
    element: PgType | None = None  # element type of an array type
    # The values are the type's Postgres text, held in a string column (a declared type
    # the lake stores as text: jsonb, arrays, uuid, ...): binary encoders must parse them.
    stored_as_text: bool = False

    def with_typmod(self, typmod: int) -> PgType:
        return PgType(self.oid, self.name, self.typlen, typmod, self.element, self.stored_as_text)

    @property
    def is_array(self) -> bool:
        return self.element is not None

    def format_type(self) -> str:
        """The SQL spelling `format_type(oid, typmod)` gives, e.g. numeric(10,2)."""
        if self.oid in VECTOR_OIDS:
            return self.name
        if self.element is not None:
            return self.element.with_typmod(self.typmod).format_type() + "[]"
        base = _SQL_NAMES.get(self.name, self.name)
        if self.typmod < 0:
            return base
        if self.name == "numeric" and self.typmod >= 4:
            precision, scale = numeric_precision_scale(self.typmod)
            return f"numeric({precision},{scale})"
        if self.name in ("varchar", "bpchar") and self.typmod >= 4:
            return f"{_SQL_NAMES.get(self.name, 'character')}({self.typmod - 4})"
        if self.name in _PRECISION_NAMES:
            head, _, tail = _PRECISION_NAMES[self.name].partition(" ")
            return f"{head}({self.typmod}){' ' + tail if tail else ''}"
        return base


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


def numeric_precision_scale(typmod: int) -> tuple[int, int]:
    value = typmod - 4
    return (value >> 16) & 0xFFFF, value & 0xFFFF


BOOL = PgType(16, "bool", 1)
BYTEA = PgType(17, "bytea", -1)
INT8 = PgType(20, "int8", 8)
INT2 = PgType(21, "int2", 2)
INT4 = PgType(23, "int4", 4)
TEXT = PgType(25, "text", -1)
OID = PgType(26, "oid", 4)
JSON = PgType(114, "json", -1)
FLOAT4 = PgType(700, "float4", 4)
FLOAT8 = PgType(701, "float8", 8)
VARCHAR = PgType(1043, "varchar", -1)
DATE = PgType(1082, "date", 4)
TIME = PgType(1083, "time", 8)
TIMESTAMP = PgType(1114, "timestamp", 8)
TIMESTAMPTZ = PgType(1184, "timestamptz", 8)
INTERVAL = PgType(1186, "interval", 16)
TIMETZ = PgType(1266, "timetz", 12)
NUMERIC = PgType(1700, "numeric", -1)
UUID = PgType(2950, "uuid", 16)
JSONB = PgType(3802, "jsonb", -1)
CHAR = PgType(18, "char", 1)
NAME = PgType(19, "name", 64)
BPCHAR = PgType(1042, "bpchar", -1)
XML = PgType(142, "xml", -1)
INET = PgType(869, "inet", -1)
CIDR = PgType(650, "cidr", -1)
MACADDR = PgType(829, "macaddr", 6)
MONEY = PgType(790, "money", 8)
BIT = PgType(1560, "bit", -1)
VARBIT = PgType(1562, "varbit", -1)
# Vectors: arrays subscripted from 0 whose text form is space-separated (pg_index.indkey,
# pg_proc.proargtypes); their binary form is the array's.
INT2VECTOR = PgType(22, "int2vector", -1, element=INT2)
OIDVECTOR = PgType(30, "oidvector", -1, element=OID)
VECTOR_OIDS = frozenset({INT2VECTOR.oid, OIDVECTOR.oid})

_ARRAY_OIDS = {
    16: 1000,
    17: 1001,
    20: 1016,
    21: 1005,
    23: 1007,
    25: 1009,
    26: 1028,
    114: 199,
    700: 1021,
    701: 1022,
    1043: 1015,
    1082: 1182,
    1083: 1183,
    1114: 1115,
    1184: 1185,
    1186: 1187,
    1266: 1270,
    1700: 1231,
    2950: 2951,
    3802: 3807,
    18: 1002,
    19: 1003,
    1042: 1014,
    142: 143,
    869: 1041,
    650: 651,
    829: 1040,
    790: 791,
    1560: 1561,
    1562: 1563,
}

BASE_TYPES: tuple[PgType, ...] = (
    BOOL,
    BYTEA,
    INT8,
    INT2,
    INT4,
    TEXT,
    OID,
    JSON,
    FLOAT4,
    FLOAT8,
    VARCHAR,
    DATE,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    INTERVAL,
    TIMETZ,
    NUMERIC,
    UUID,
    JSONB,
    CHAR,
    NAME,
    BPCHAR,
    XML,
    INET,
    CIDR,
    MACADDR,
    MONEY,
    BIT,
    VARBIT,
)

_SQL_NAMES = {
    "bool": "boolean",
    "int2": "smallint",
    "int4": "integer",
    "int8": "bigint",
    "float4": "real",
    "float8": "double precision",
    "varchar": "character varying",
    "time": "time without time zone",
    "timetz": "time with time zone",
    "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
    "bpchar": "character",
    "varbit": "bit varying",
    "char": '"char"',
}
# Types whose modifier is a precision, shown after the first word.
_PRECISION_NAMES = {
    "time": "time without time zone",
    "timetz": "time with time zone",
    "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
    "bit": "bit",
    "varbit": "bit varying",
}


def array_of(element: PgType) -> PgType:
    oid = _ARRAY_OIDS.get(element.oid, 1009)
    base = element if element.oid in _ARRAY_OIDS else TEXT
    return PgType(oid, "_" + base.name, -1, element.typmod, base)


ALL_TYPES: tuple[PgType, ...] = (
    BASE_TYPES + tuple(array_of(t) for t in BASE_TYPES) + (INT2VECTOR, OIDVECTOR)
)
BY_OID: dict[int, PgType] = {t.oid: t for t in ALL_TYPES}


def declared_type(type_oid: int, typmod: int, duckdb_type: str) -> PgType | None:
    """The Postgres type a client should see for a column the source declares as
    (`type_oid`, `typmod`) and DuckDB reads as `duckdb_type`; None when it is not a
    built-in type known here or the lake holds the column in a type of its own (the
    stored type is then what clients see)."""
    declared = BY_OID.get(type_oid)
    if declared is None or declared.oid in VECTOR_OIDS:
        return None
    stored = pg_type_for_duckdb(duckdb_type)
    if stored.oid == declared.oid:
        return declared.with_typmod(typmod if typmod >= 0 else stored.typmod)
    if stored.oid == TEXT.oid and stored.element is None:
        typed = declared.with_typmod(typmod)
        return PgType(typed.oid, typed.name, typed.typlen, typed.typmod, typed.element, True)
    return None


_SIMPLE = {
    "BOOLEAN": BOOL,
    "TINYINT": INT2,
    "SMALLINT": INT2,
    "UTINYINT": INT2,
    "INTEGER": INT4,
    "USMALLINT": INT4,
    "BIGINT": INT8,
    "UINTEGER": INT8,
    "UBIGINT": NUMERIC,
    "HUGEINT": NUMERIC,
    "UHUGEINT": NUMERIC,
    "VARINT": NUMERIC,
    "BIGNUM": NUMERIC,
    "FLOAT": FLOAT4,
    "DOUBLE": FLOAT8,
    "VARCHAR": TEXT,
    "BLOB": BYTEA,
    "DATE": DATE,
    "TIME": TIME,
    "TIME WITH TIME ZONE": TIMETZ,
    "TIMESTAMP": TIMESTAMP,
    "TIMESTAMP_S": TIMESTAMP,
    "TIMESTAMP_MS": TIMESTAMP,
    "TIMESTAMP_NS": TIMESTAMP,
    "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ,
    "INTERVAL": INTERVAL,
    "UUID": UUID,
    "JSON": JSON,
}

# streambed.server.numeric.TEXT_RESULT_TYPE as DuckDB describes it
NUMERIC_TEXT_TYPE = "STRUCT(sb_numeric_order DOUBLE, sb_numeric_text VARCHAR)"
# streambed.server.numeric.OPERANDS_TYPE_PREFIX: a quotient's operands (the server computes
# its text), STRUCT(sb_dividend <type>, sb_divisor <type>)
NUMERIC_OPERANDS_PREFIX = "STRUCT(sb_dividend "


def is_numeric_operands(type_name: str) -> bool:
    return type_name.startswith(NUMERIC_OPERANDS_PREFIX) and ", sb_divisor " in type_name


_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")


def pg_type_for_duckdb(type_name: str) -> PgType:
    """Map a DuckDB type string (as in cursor.description or DESCRIBE) to a Postgres type."""
    text = type_name.strip()
    upper = text.upper()
    if upper.endswith("]"):
        inner = re.sub(r"\[\d*\]$", "", text)
        element = pg_type_for_duckdb(inner)
        if element.element is not None:  # nested lists: Postgres arrays are multidimensional
            return element
        return array_of(element)
    simple = _SIMPLE.get(upper)
    if simple is not None:
        return simple
    if text == NUMERIC_TEXT_TYPE or is_numeric_operands(text):
        # an exact avg()/division: Postgres's text, its own scale
        return NUMERIC
    match = _DECIMAL.match(upper)
    if match:
        return NUMERIC.with_typmod(numeric_typmod(int(match.group(1)), int(match.group(2))))
    if upper.startswith("VARCHAR"):
        return TEXT
    return TEXT


def pg_type_for_arrow(data_type: pa.DataType) -> PgType:
    """Fallback mapping from an Arrow type, when no DuckDB type is known."""
    if pa.types.is_boolean(data_type):
        return BOOL
    if pa.types.is_int8(data_type) or pa.types.is_int16(data_type) or pa.types.is_uint8(data_type):
        return INT2
    if pa.types.is_int32(data_type) or pa.types.is_uint16(data_type):
        return INT4
    if pa.types.is_int64(data_type) or pa.types.is_uint32(data_type):
        return INT8
    if pa.types.is_uint64(data_type):
        return NUMERIC
    if pa.types.is_float32(data_type) or pa.types.is_float16(data_type):
        return FLOAT4
    if pa.types.is_float64(data_type):
        return FLOAT8
    if pa.types.is_decimal(data_type):
        return NUMERIC.with_typmod(numeric_typmod(data_type.precision, data_type.scale))
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return BYTEA
    if pa.types.is_date(data_type):
        return DATE
    if pa.types.is_time(data_type):
        return TIME
    if pa.types.is_timestamp(data_type):
        return TIMESTAMPTZ if data_type.tz is not None else TIMESTAMP
    if pa.types.is_interval(data_type) or pa.types.is_duration(data_type):
        return INTERVAL
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        element = pg_type_for_arrow(data_type.value_type)
        return element if element.element is not None else array_of(element)
    return TEXT


# ---- text encoders ---------------------------------------------------------------------

Encoded = list[bytes | None]


def encode_text_column(
    array: pa.Array | pa.ChunkedArray, pg_type: PgType, tz: str = "UTC"
) -> Encoded:
    """Render every value of `array` as Postgres would in text format (None for NULL).

    `tz` is the session TimeZone (IANA name or 'UTC'), used for timestamptz values.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    data_type = array.type
    if pa.types.is_dictionary(data_type):
        array = array.dictionary_decode()
        data_type = array.type
    if pa.types.is_null(data_type):
        return [None] * len(array)
    if pa.types.is_boolean(data_type):
        return _as_bytes(pc.if_else(array, "t", "f"))
    if pa.types.is_integer(data_type):
        return _as_bytes(pc.cast(array, pa.string()))
    if pa.types.is_decimal(data_type):
        return _decimal_column(array)
    if pa.types.is_floating(data_type):
        single = pa.types.is_float32(data_type) or pa.types.is_float16(data_type)
        return _float_column(array, single)
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return _as_bytes(array)
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return [None if v is None else b"\\x" + v.hex().encode() for v in array.to_pylist()]
    if pa.types.is_fixed_size_binary(data_type):
        return _uuid_or_bytes(array, pg_type)
    if pa.types.is_date(data_type):
        if pa.types.is_date32(data_type) and not _within(array, pa.int32(), *_NORMAL_DAYS):
            return [None if v is None else format_date(v).encode() for v in _ints(array)]
        return _as_bytes(pc.cast(array, pa.string()))
    if pa.types.is_time(data_type):
        micros = pc.cast(array, pa.time64("us"))
        if not _within(micros, pa.int64(), 0, _MICROS_PER_DAY - 1):
            return [None if v is None else format_time(v).encode() for v in _ints(micros)]
        text = pc.cast(micros, pa.string())
        return _as_bytes(_strip_fraction(text))
    if pa.types.is_timestamp(data_type):
        if data_type.unit == "us" and not _within(array, pa.int64(), *_NORMAL_MICROS):
            return _extended_timestamps(array, tz)
        return _timestamp_column(array, tz)
    if pa.types.is_interval(data_type):
        return [None if v is None else format_interval(*v).encode() for v in _intervals(array)]
    if pa.types.is_duration(data_type):
        return _encode_python(array, pg_type, tz)
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return _list_column(array, pg_type, tz)
    return _encode_python(array, pg_type, tz)


# ---- dates and times outside years 1..9999: BC, far future, infinity ------------------
# The lake stores Postgres' infinities as DuckDB does: date ±(2^31 - 1) days, timestamps
# ±(2^63 - 1) µs; a time of 24:00:00 is 86 400 000 000 µs. Arrow's own formatting covers
# only years 1..9999, so columns with other values are rendered here, value by value.

_MICROS_PER_DAY = 86_400_000_000
_DATE_INFINITY = 2**31 - 1
_TIMESTAMP_INFINITY = 2**63 - 1
_NORMAL_DAYS = (-719_162, 2_932_896)  # 0001-01-01 .. 9999-12-31
_NORMAL_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)


def _within(array: pa.Array, storage: pa.DataType, low: int, high: int) -> bool:
    values = array.view(storage)
    bounds = pc.min_max(values)
    lowest, highest = bounds["min"].as_py(), bounds["max"].as_py()
    return lowest is None or (lowest >= low and highest <= high)


def _ints(array: pa.Array) -> list[int | None]:
    width = pa.int32() if pa.types.is_date32(array.type) else pa.int64()
    values: list[int | None] = array.view(width).to_pylist()
    return values


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of days since 1970-01-01, proleptic Gregorian (year 0 = 1 BC)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _ymd(days: int) -> tuple[str, bool]:
    year, month, day = _civil(days)
    bc = year <= 0
    return f"{(1 - year) if bc else year:04d}-{month:02d}-{day:02d}", bc


def format_date(days: int) -> str:
    """A date (days since 1970-01-01) as Postgres renders it: '0044-03-15 BC', 'infinity'."""
    if days >= _DATE_INFINITY:
        return "infinity"
    if days <= -_DATE_INFINITY:
        return "-infinity"
    text, bc = _ymd(days)
    return text + " BC" if bc else text


def format_time(micros: int) -> str:
    """A time of day in µs, including 24:00:00."""
    seconds, frac = divmod(micros, 1_000_000)
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    text = f"{hours:02d}:{mins:02d}:{secs:02d}"
    return text + f".{frac:06d}".rstrip("0") if frac else text


def format_timestamp(micros: int, offset_seconds: int | None = None) -> str:
    """A timestamp in µs since 1970 (UTC for timestamptz) as Postgres renders it; with
    `offset_seconds` (timestamptz) the value is shown in that offset, '+05:30'-style."""
    if micros >= _TIMESTAMP_INFINITY:
        return "infinity"
    if micros <= -_TIMESTAMP_INFINITY:
        return "-infinity"
    if offset_seconds is not None:
        micros += offset_seconds * 1_000_000
    days, rest = divmod(micros, _MICROS_PER_DAY)
    date, bc = _ymd(days)
    text = f"{date} {format_time(rest)}"
    if offset_seconds is not None:
        sign = "-" if offset_seconds < 0 else "+"
        hours, remainder = divmod(abs(offset_seconds), 3600)
        minutes, secs = divmod(remainder, 60)
        text += f"{sign}{hours:02d}"
        if minutes or secs:
            text += f":{minutes:02d}"
        if secs:
            text += f":{secs:02d}"
    return text + " BC" if bc else text


def _extended_timestamps(array: pa.Array, tz: str) -> Encoded:
    with_zone = array.type.tz is not None
    offsets: dict[int, int] = {}

    def offset(micros: int) -> int | None:
        if not with_zone:
            return None
        if tz.upper() in ("UTC", "GMT", "Z", "ETC/UTC"):
            return 0
        # Python datetimes end at years 1 and 9999: beyond them, the zone's offset there.
        margin = 2 * _MICROS_PER_DAY
        clamped = min(max(micros, _NORMAL_MICROS[0] + margin), _NORMAL_MICROS[1] - margin)
        # by minute: zones change offset on the half hour (St. John's, Adelaide)
        minute = clamped // 60_000_000
        if minute not in offsets:
            import datetime as dt
            from zoneinfo import ZoneInfo

            moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)
            delta = moment.astimezone(ZoneInfo(tz)).utcoffset() or dt.timedelta(0)
            offsets[minute] = int(delta.total_seconds())
        return offsets[minute]

    return [None if v is None else format_timestamp(v, offset(v)).encode() for v in _ints(array)]


def _decimal_column(array: pa.Array) -> Encoded:
    """Decimals in plain notation with all scale digits, as Postgres prints numerics
    (Arrow writes small magnitudes in exponent form: -1E-10)."""
    out = _as_bytes(pc.cast(array, pa.string()))
    for i, text in enumerate(out):
        if text is not None and b"E" in text:
            out[i] = f"{Decimal(text.decode()):f}".encode()
    return out


def _as_bytes(array: pa.Array) -> Encoded:
    result: Encoded = pc.cast(array, pa.binary()).to_pylist()
    return result


def _uuid_or_bytes(array: pa.Array, pg_type: PgType) -> Encoded:
    values = array.to_pylist()
    if pg_type.oid == UUID.oid:
        import uuid

        return [None if v is None else str(uuid.UUID(bytes=v)).encode() for v in values]
    return [None if v is None else b"\\x" + v.hex().encode() for v in values]


_FLOAT = re.compile(r"^(-?)(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$")


def format_float(text: str, single: bool = False) -> str:
    """Reformat a shortest round-trip float rendering the way Postgres 15 prints it."""
    if text in ("inf", "Infinity"):
        return "Infinity"
    if text in ("-inf", "-Infinity"):
        return "-Infinity"
    if text in ("nan", "-nan", "NaN"):
        return "NaN"
    match = _FLOAT.match(text)
    if match is None:
        return text
    sign, whole, frac, exp = match.group(1), match.group(2), match.group(3) or "", match.group(4)
    digits = (whole + frac).lstrip("0")
    if not digits:
        return sign + "0"
    # decimal exponent of the first significant digit
    point = len(whole) + (int(exp) if exp else 0)
    leading_zeros = len(whole + frac) - len((whole + frac).lstrip("0"))
    exponent = point - leading_zeros - 1
    digits = digits.rstrip("0")
    limit = 6 if single else 15
    if -4 <= exponent < limit:
        if exponent < 0:
            return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
        int_part = digits[: exponent + 1].ljust(exponent + 1, "0")
        frac_part = digits[exponent + 1 :]
        return f"{sign}{int_part}.{frac_part}" if frac_part else f"{sign}{int_part}"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def _float_column(array: pa.Array, single: bool) -> Encoded:
    """Arrow writes the same shortest round-trip digits as Postgres 15; only where it
    chooses exponent notation differently (and for nan/inf) is a value reformatted here.
    Plain notation is right for magnitudes in [1e-4, 1e15) (float4: [1e-4, 1e6)) and 0."""
    texts = pc.cast(array, pa.string())
    magnitude = pc.abs(array)
    slow = pc.or_(
        pc.or_(pc.match_substring(texts, "e"), pc.match_substring(texts, "n")),
        pc.or_(
            pc.and_(pc.less(magnitude, 1e-4), pc.not_equal(magnitude, 0)),
            pc.greater_equal(magnitude, 1e6 if single else 1e15),
        ),
    )
    out = _as_bytes(texts)
    for i in pc.indices_nonzero(slow.fill_null(False)).to_pylist():
        text = out[i]
        if text is not None:
            out[i] = format_float(text.decode(), single).encode()
    return out


def _strip_fraction(text: pa.Array) -> pa.Array:
    """'03:04:05.120000' -> '03:04:05.12'; '03:04:05.000000' -> '03:04:05'."""
    text = pc.replace_substring_regex(text, pattern=r"0+$", replacement="")
    return pc.replace_substring_regex(text, pattern=r"\.$", replacement="")


def _strip_micros(text: pa.Array) -> pa.Array:
    """Arrow's '2024-01-02 03:04:05.120000' (always six digits) as Postgres writes it:
    '2024-01-02 03:04:05.12'; a zero fraction goes away."""
    return pc.replace_substring_regex(text, pattern=r"\.?0+$", replacement="")


def _offset_text(seconds: int) -> str:
    sign = "-" if seconds < 0 else "+"
    hours, remainder = divmod(abs(seconds), 3600)
    minutes, secs = divmod(remainder, 60)
    text = f"{sign}{hours:02d}"
    if minutes or secs:
        text += f":{minutes:02d}"
    return text + f":{secs:02d}" if secs else text


def _timestamp_column(array: pa.Array, tz: str) -> Encoded:
    data_type = array.type
    if data_type.unit != "us":
        array = pc.cast(array, pa.timestamp("us", data_type.tz), safe=False)
    if data_type.tz is None:
        return _as_bytes(_strip_micros(pc.cast(array, pa.string())))
    utc = array.view(pa.int64())
    if tz.upper() in ("UTC", "GMT", "Z", "ETC/UTC"):
        text = _strip_micros(pc.cast(array.view(pa.timestamp("us")), pa.string()))
        return _as_bytes(pc.binary_join_element_wise(text, "+00", ""))
    try:
        local = pc.local_timestamp(array.view(pa.timestamp("us", tz)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _encode_python(array, TIMESTAMPTZ, tz)
    text = _strip_micros(pc.cast(local, pa.string()))
    # the zone's offset at each instant: few distinct values, formatted once each
    offsets = pc.divide(pc.subtract(local.view(pa.int64()), utc), 1_000_000)
    distinct = pc.unique(offsets)
    names = pa.array([None if o is None else _offset_text(o) for o in distinct.to_pylist()])
    suffix = pc.take(names, pc.index_in(offsets, distinct))
    out = _as_bytes(pc.binary_join_element_wise(text, suffix, ""))
    # Arrow's zone rules end in 2037; Postgres (like zoneinfo) extends the zone's last rule
    late = pc.indices_nonzero(pc.greater_equal(utc, _ARROW_ZONE_RULES_END).fill_null(False))
    if len(late):
        positions = late.to_pylist()
        for i, value in zip(positions, _extended_timestamps(array.take(late), tz), strict=True):
            out[i] = value
    return out


_ARROW_ZONE_RULES_END = 2_145_916_800_000_000  # 2038-01-01 in µs


def _intervals(array: pa.Array) -> list[tuple[int, int, int] | None]:
    values: list[tuple[int, int, int] | None] = []
    for v in array:
        if not v.is_valid:
            values.append(None)
        else:
            mdn = v.value
            values.append((mdn.months, mdn.days, mdn.nanoseconds))
    return values


def format_interval(months: int, days: int, nanoseconds: int) -> str:
    """Postgres 'postgres' IntervalStyle: '1 year 2 mons 3 days 04:05:06.5'."""
    parts: list[str] = []
    years, mons = int(months / 12), months - int(months / 12) * 12
    if years:
        parts.append(f"{years} year{'s' if abs(years) != 1 else ''}")
    if mons:
        parts.append(f"{mons} mon{'s' if abs(mons) != 1 else ''}")
    if days:
        parts.append(f"{days} day{'s' if abs(days) != 1 else ''}")
    micros = int(nanoseconds / 1000)
    if micros or not parts:
        negative = micros < 0
        micros = abs(micros)
        seconds, frac = divmod(micros, 1_000_000)
        hours, rest = divmod(seconds, 3600)
        minutes, secs = divmod(rest, 60)
        clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
        if frac:
            clock += f".{frac:06d}".rstrip("0")
        sign = "-" if negative else ("+" if parts and any(p.startswith("-") for p in parts) else "")
        parts.append(sign + clock)
    return " ".join(parts)


def _list_column(array: pa.Array, pg_type: PgType, tz: str) -> Encoded:
    element_type = pg_type.element or TEXT
    flat = array.flatten()
    inner: Encoded = encode_text_column(flat, element_type, tz) if len(flat) else []
    is_nested = pa.types.is_list(array.type.value_type) or pa.types.is_large_list(
        array.type.value_type
    )
    offsets = array.offsets.to_pylist()
    valid = array.is_valid().to_pylist()
    out: Encoded = []
    vector = pg_type.oid in VECTOR_OIDS
    for i, ok in enumerate(valid):
        if not ok:
            out.append(None)
            continue
        items = inner[offsets[i] - offsets[0] : offsets[i + 1] - offsets[0]]
        if vector:  # int2vector, oidvector: "1 2"
            out.append(b" ".join(b"0" if item is None else item for item in items))
            continue
        rendered = [
            b"NULL" if item is None else (item if is_nested else _quote_array_item(item))
            for item in items
        ]
        out.append(b"{" + b",".join(rendered) + b"}")
    return out


_NEEDS_QUOTES = re.compile(rb'[{},"\\\s]')


def _quote_array_item(item: bytes) -> bytes:
    if item == b"" or item.upper() == b"NULL" or _NEEDS_QUOTES.search(item):
        return b'"' + item.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
    return item


def _encode_python(array: pa.Array, pg_type: PgType, tz: str) -> Encoded:
    return [None if v is None else format_value(v, pg_type, tz).encode() for v in array.to_pylist()]


def format_value(value: Any, pg_type: PgType, tz: str = "UTC") -> str:
    """Render one Python value in Postgres text format (slow path)."""
    import datetime as dt

    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return format_float(repr(value), pg_type.oid == FLOAT4.oid)
    if isinstance(value, Decimal | int):
        return str(value)
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            from zoneinfo import ZoneInfo

            value = value.astimezone(ZoneInfo(tz))
            offset = value.utcoffset() or dt.timedelta(0)
            total = int(offset.total_seconds())
            sign = "-" if total < 0 else "+"
            hours, minutes = divmod(abs(total) // 60, 60)
            zone = f"{sign}{hours:02d}" + (f":{minutes:02d}" if minutes else "")
            return _format_naive(value.replace(tzinfo=None)) + zone
        return _format_naive(value)
    if isinstance(value, dt.timedelta):
        return format_interval(
            0, value.days, (value.seconds * 1_000_000 + value.microseconds) * 1000
        )
    if isinstance(value, list):
        element = pg_type.element or TEXT
        rendered = []
        for item in value:
            if item is None:
                rendered.append("NULL")
            elif isinstance(item, list):
                rendered.append(format_value(item, pg_type, tz))
            else:
                rendered.append(
                    _quote_array_item(format_value(item, element, tz).encode()).decode()
                )
        return "{" + ",".join(rendered) + "}"
    if isinstance(value, dict):
        import json

        return json.dumps(value, default=str)
    return str(value)


def _format_naive(value: Any) -> str:
    text: str = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text


TextEncoder = Callable[[pa.Array, PgType, str], Encoded]
