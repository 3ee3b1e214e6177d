"""Every column type round-trips: what the query port sends equals what Postgres renders.

One table has a column of each type; its rows are generated from per-type edge values
(extremes, NaN and infinities, BC and far-future dates, NULLs, escaping-heavy strings,
multi-dimensional arrays with NULL elements). The test compares the text form of every
value through streambed's query port with the source's own text rendering, after the
rows are inserted (an Arrow append) and again after every row is updated (a Spark merge
that reads and rewrites the files).
"""

from __future__ import annotations

import pytest

from tests.integration.fidelity.conftest import Served

pytestmark = pytest.mark.integration

TYPES = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
CREATE DOMAIN price AS numeric(10,2);
CREATE DOMAIN label AS varchar(20);
CREATE DOMAIN moment AS timestamptz;
"""

# column name -> (SQL type, edge values as SQL literals)
COLUMNS: dict[str, tuple[str, list[str]]] = {
    "b": ("bool", ["true", "false"]),
    "i2": ("int2", ["-32768", "32767", "0"]),
    "i4": ("int4", ["-2147483648", "2147483647", "0"]),
    "i8": ("int8", ["-9223372036854775808", "9223372036854775807", "0"]),
    "f4": (
        "float4",
        [
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "'3.4028235e38'",
            "'1.4e-45'",
            "'-0'",
            "'0.1'",
            "'1.17549435e-38'",
            "'123456.7'",
            "'1e7'",
        ],
    ),
    "f8": (
        "float8",
        [
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "'1.7976931348623157e308'",
            "'5e-324'",
            "'-0'",
            "'0.1'",
            "'1e15'",
            "'123456789012345.6'",
            "'2.2250738585072014e-308'",
            "'1e-5'",
        ],
    ),
    "n10_2": ("numeric(10,2)", ["-99999999.99", "99999999.99", "0", "0.01", "-0.5"]),
    "n38_10": (
        "numeric(38,10)",
        ["9999999999999999999999999999.9999999999", "-0.0000000001", "1"],
    ),
    "n5_5": ("numeric(5,5)", ["0.99999", "-0.00001"]),
    "n_any": (
        "numeric",
        [
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "1e-300",
            "123456789012345678901234567890.123456789",
            "-0.000",
            "1.5e20",
        ],
    ),
    "n50_5": ("numeric(50,5)", ["123456789012345678901234567890123456789012345.12345", "0"]),
    "t": (
        "text",
        [
            "''",
            "'a''b'",
            "'ünïcødé 🎉'",
            "E'tab\\there\\nnew\\\\line \"q\"'",
            "repeat('x', 3000)",
            "'NULL'",
        ],
    ),
    "vc": ("varchar(5)", ["'abcde'", "''", "' '"]),
    "ch": ("char(5)", ["'ab'", "'abcde'"]),
    "c1": ('"char"', ["'a'", "'\\'"]),
    "nm": ("name", ["'pg_catalog'"]),
    "ba": ("bytea", ["'\\x'", "'\\x00ff10'", "decode(repeat('ab', 300), 'hex')"]),
    "d": (
        "date",
        [
            "'infinity'",
            "'-infinity'",
            "'4713-01-01 BC'",
            "'5874897-12-31'",
            "'2000-02-29'",
            "'0044-03-15 BC'",
            "'0001-01-01'",
            "'9999-12-31'",
            "'10000-01-01'",
        ],
    ),
    "tm": ("time", ["'00:00:00'", "'24:00:00'", "'23:59:59.999999'", "'12:34:56.5'"]),
    "ttz": ("timetz", ["'00:00:00+1559'", "'24:00:00-1559'", "'12:34:56.789+05:30'"]),
    "ts": (
        "timestamp",
        [
            "'infinity'",
            "'-infinity'",
            "'4713-01-01 00:00:00 BC'",
            "'294246-12-31 23:59:59.999999'",
            "'2000-01-01 00:00:00.000001'",
            "'1999-12-31 23:59:59.5'",
            "'0001-01-01 00:00:00 BC'",
            "'1582-10-10 12:00:00'",
        ],
    ),
    "tstz": (
        "timestamptz",
        [
            "'infinity'",
            "'-infinity'",
            "'4713-01-01 00:00:00+00 BC'",
            "'294246-12-31 23:59:59.999999+00'",
            "'2024-03-10 02:30:00.25-08'",
            "'1900-01-01 00:00:00+05:53:28'",
        ],
    ),
    "iv": (
        "interval",
        [
            "'1 year 2 mons 3 days 04:05:06.789'",
            "'-178000000 years'",
            "'178000000 years'",
            "'-1 days +00:00:01'",
            "'0'",
            "'1 microsecond'",
        ],
    ),
    "u": (
        "uuid",
        ["'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'"],
    ),
    "js": ("json", ['\'{"a": [1, 2.50, null],  "b" : "é"}\'', "'\"x\"'", "'null'"]),
    "jb": ("jsonb", ['\'{"a": [1, 2.50, null],  "b" : "é"}\'', "'[]'", "'1e2'"]),
    "ai": ("int4[]", ["'{1,NULL,3}'", "'{{1,2},{3,4}}'", "'{}'", "'[0:1]={1,2}'"]),
    "atx": ("text[]", [r"""'{"a b",NULL,"NULL","\"q\"",""}'""", "'{{a,b},{c,d}}'"]),
    "af": ("float8[]", ["'{NaN,Infinity,-0,0.1}'"]),
    "ad": ("date[]", ["'{infinity,2000-01-01,NULL}'"]),
    "an": ("numeric[]", ["'{1.50,NaN,-0.000}'"]),
    "ab": ("bool[]", ["'{t,f,NULL}'"]),
    "atz": ("timestamptz[]", ["'{2000-01-01 00:00:00+00,infinity}'"]),
    "ae": ("mood[]", ["'{sad,happy}'"]),
    "e": ("mood", ["'sad'", "'happy'"]),
    "dp": ("posint", ["1", "2147483647"]),
    "dn": ("price", ["12.5", "-99999999.99"]),
    "dl": ("label", ["'twenty characters..!'"]),
    "dm": ("moment", ["'infinity'", "'2020-02-29 12:00:00+00'"]),
    "ip": ("inet", ["'192.168.0.1/24'", "'::1'", "'10.0.0.1'"]),
    "cd": ("cidr", ["'10.0.0.0/8'", "'2001:db8::/32'"]),
    "mc": ("macaddr", ["'08:00:2b:01:02:03'"]),
    "m8": ("macaddr8", ["'08:00:2b:01:02:03:04:05'"]),
    "mn": ("money", ["'-92233720368547758.08'", "'92233720368547758.07'", "'0'"]),
    "pt": ("point", ["'(1.5,-2)'"]),
    "tv": ("tsvector", ["'a fat cat sat'"]),
    "rg": ("int4range", ["'[1,5)'", "'empty'"]),
    "bt": ("bit(3)", ["B'101'"]),
    "vb": ("varbit", ["B''", "B'1'"]),
    "ln": ("pg_lsn", ["'16/B374D848'"]),
    "xm": ("xml", ["'<a x=\"1\">é</a>'"]),
    "oi": ("oid", ["4294967295", "0"]),
}


def create_and_fill(served: Served) -> str:
    columns = ", ".join(f"{name} {sql_type}" for name, (sql_type, _) in COLUMNS.items())
    served.execute(TYPES, f"CREATE TABLE alltypes (id int PRIMARY KEY, {columns})")
    return columns


def insert_rows(served: Served) -> int:
    rows = max(len(values) for _, values in COLUMNS.values())
    names = ", ".join(COLUMNS)
    statements = []
    for i in range(rows):
        literals = [
            f"({values[i % len(values)]})::{sql_type}" for sql_type, values in COLUMNS.values()
        ]
        statements.append(f"INSERT INTO alltypes (id, {names}) VALUES ({i}, {', '.join(literals)})")
    statements.append(f"INSERT INTO alltypes (id) VALUES ({rows})")  # every column NULL
    served.execute(*statements)
    return rows + 1


def select_all() -> str:
    return f"SELECT id, {', '.join(COLUMNS)} FROM public.alltypes ORDER BY id"


def test_every_type_reads_back_as_postgres_renders_it(served: Served) -> None:
    create_and_fill(served)
    served.start()
    count = insert_rows(served)
    served.wait_equal(select_all())  # appended by Arrow
    # Every row rewritten by a Spark merge, then read again.
    served.execute("UPDATE alltypes SET b = NOT b WHERE id % 2 = 0")
    served.wait_equal(select_all())
    assert len(served.source_text(select_all())) == count
    served.proc.stop()


@pytest.mark.parametrize("reader", ["duckdb", "csv"])
def test_every_type_copied_reads_back_as_postgres_renders_it(served: Served, reader: str) -> None:
    """The same rows present before the first start: the initial copy reads them (binary
    COPY decoded by DuckDB, or CSV), not the stream."""
    create_and_fill(served)
    count = insert_rows(served)
    # char(n) with trailing blanks and multibyte characters (the DuckDB reader pads again).
    served.execute(
        "CREATE TABLE chars (id int PRIMARY KEY, c char(5), b bpchar, v varchar(4))",
        "INSERT INTO chars VALUES (1, 'ab', 'ab  ', 'ab  '), (2, 'éè', ' ', ''), "
        "(3, '', '', NULL), (4, NULL, NULL, 'x'), (5, 'abcde', 'a b', ' a ')",
    )
    # char(n) values that repeat: the DuckDB reader pads each distinct value once and writes
    # a dictionary (duck.pad_distinct); the stream's merge then rewrites those files.
    served.execute(
        "CREATE TABLE codes (id int PRIMARY KEY, c char(3), d char(2))",
        "INSERT INTO codes SELECT g, (ARRAY['a', 'bb', 'é', ''])[g % 4 + 1], "
        "CASE WHEN g % 7 <> 0 THEN 'x' END FROM generate_series(1, 300) g",
    )
    # A type whose output function lives outside pg_catalog, in a schema whose name needs
    # quoting (the DuckDB reader calls each type's output function by name).
    served.execute(
        'CREATE SCHEMA "Ext ns"',
        'CREATE EXTENSION hstore SCHEMA "Ext ns"',
        'CREATE TABLE kv (id int PRIMARY KEY, h "Ext ns".hstore, u uuid, j jsonb)',
        "INSERT INTO kv VALUES (1, 'a=>1, \"b c\"=>NULL', gen_random_uuid(), '{\"x\": [1.50]}'), "
        "(2, '', '00000000-0000-0000-0000-000000000000', 'null'), (3, NULL, NULL, NULL)",
    )
    served.start(STREAMBED_COPY_READER=reader)
    served.wait_equal(select_all())
    served.wait_equal("SELECT id, c, b, v FROM chars ORDER BY id")
    served.wait_equal("SELECT id, c, d FROM codes ORDER BY id")
    served.wait_equal("SELECT id, h, u, j FROM kv ORDER BY id")
    served.execute("UPDATE codes SET c = 'zz', d = NULL WHERE id % 5 = 0")
    served.wait_equal("SELECT id, c, d FROM codes ORDER BY id")
    assert len(served.source_text(select_all())) == count
    served.proc.stop()
