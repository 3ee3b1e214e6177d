"""More of pg_catalog, for the catalog queries of BI and admin tools (pgAdmin 4, DBeaver,
Npgsql, Metabase, Grafana, pgjdbc): pg_proc with the type I/O functions, pg_range,
pg_tables, pg_indexes, pg_stat_user_tables, the session-dependent pg_settings and
pg_database, and functions such as parse_ident and pg_get_partkeydef.

pg_settings and pg_database depend on the session (its settings, the database it connected
to): `streambed.server.rewrite` replaces them by calls of the table macros `sb_settings`
and `sb_database` with the session's values as constants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import duckdb
import pyarrow as pa
from pglast import keywords

from streambed.server import pgtypes

SCHEMA = "sb_pg"
PG_CATALOG_OID = 11
OWNER_OID = 10

# Keywords quote_ident() quotes, as Postgres does: all but the unreserved ones.
QUOTED_KEYWORDS = frozenset(
    keywords.RESERVED_KEYWORDS | keywords.COL_NAME_KEYWORDS | keywords.TYPE_FUNC_NAME_KEYWORDS
)
QUOTED_KEYWORDS_SQL = "[" + ", ".join(f"'{k}'" for k in sorted(QUOTED_KEYWORDS)) + "]"

# Server settings clients look up that a session cannot change (SHOW and SET do not know
# them; current_setting() and pg_settings do), with Postgres 15's values.
SERVER_SETTINGS: dict[str, str] = {
    "block_size": "8192",
    "data_checksums": "off",
    "max_connections": "100",
    "max_function_args": "100",
    "max_index_keys": "32",
    "segment_size": "131072",
    "wal_block_size": "8192",
    "ssl": "off",
    "default_text_search_config": "pg_catalog.english",
}

# pg_settings columns besides name and setting: unit and vartype by name.
_UNITS = {"statement_timeout": "ms", "lock_timeout": "ms", "block_size": None,
          "idle_in_transaction_session_timeout": "ms", "work_mem": "kB"}  # fmt: skip
_INTEGER_SETTINGS = {
    "statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout", "block_size",
    "max_connections", "max_function_args", "max_index_keys", "max_identifier_length",
    "segment_size", "wal_block_size", "server_version_num", "extra_float_digits", "work_mem",
}  # fmt: skip
_BOOL_SETTINGS = {
    "data_checksums", "ssl", "integer_datetimes", "is_superuser", "jit", "row_security",
    "geqo", "standard_conforming_strings", "transaction_read_only",
    "default_transaction_read_only",
}  # fmt: skip
_FIXED_SETTINGS = set(SERVER_SETTINGS) | {
    "server_version", "server_version_num", "server_encoding", "integer_datetimes",
    "max_identifier_length",
}  # fmt: skip

RANGE_TYPES = (
    # range, subtype, multirange, name
    (3904, 23, 4451, "int4range"),
    (3926, 20, 4536, "int8range"),
    (3906, 1700, 4532, "numrange"),
    (3908, 1114, 4533, "tsrange"),
    (3910, 1184, 4534, "tstzrange"),
    (3912, 1082, 4535, "daterange"),
)

_PROC_COLUMNS = (
    "oid BIGINT, proname VARCHAR, pronamespace BIGINT, proowner BIGINT, prolang BIGINT, "
    "procost FLOAT, prorows FLOAT, provariadic BIGINT, prosupport BIGINT, prokind VARCHAR, "
    "prosecdef BOOLEAN, proleakproof BOOLEAN, proisstrict BOOLEAN, proretset BOOLEAN, "
    "provolatile VARCHAR, proparallel VARCHAR, pronargs SMALLINT, pronargdefaults SMALLINT, "
    "prorettype BIGINT, proargtypes BIGINT[], proallargtypes BIGINT[], proargmodes VARCHAR[], "
    "proargnames VARCHAR[], proargdefaults VARCHAR, protrftypes BIGINT[], prosrc VARCHAR, "
    "probin VARCHAR, prosqlbody VARCHAR, proconfig VARCHAR[], proacl VARCHAR[]"
)

# Postgres's oids of the type I/O functions clients look for by name.
_KNOWN_PROCS = {"array_in": 750, "array_out": 751, "array_recv": 2400, "array_send": 2401,
                "record_recv": 2402, "record_send": 2403}  # fmt: skip


def proc_oid(name: str) -> int:
    """The oid of the pg_proc row of a type I/O function (stable, below the user range)."""
    import zlib

    return _KNOWN_PROCS.get(name) or 8_000 + zlib.crc32(name.encode()) % 8_000


# Types of catalog columns (no table column has them): oid, name, SQL name, typlen,
# category, element.
CATALOG_TYPES = (
    (19, "name", "name", 64, "S", 0),
    (18, "char", '"char"', 1, "Z", 0),
    (24, "regproc", "regproc", 4, "N", 0),
    (2205, "regclass", "regclass", 4, "N", 0),
    (2206, "regtype", "regtype", 4, "N", 0),
    (22, "int2vector", "int2vector", -1, "A", 21),
    (30, "oidvector", "oidvector", -1, "A", 26),
)


def catalog_type_rows(template: Mapping[str, object]) -> list[dict[str, object]]:
    """pg_type rows of CATALOG_TYPES, `template` (a base type's row) giving the rest."""
    rows = []
    for oid, name, sqlname, typlen, category, elem in CATALOG_TYPES:
        own = {"oid": oid, "typname": name, "typlen": typlen, "typcategory": category,
               "typbyval": typlen in (1, 4), "typelem": elem, "typarray": 0,
               "typcollation": 950 if name == "name" else 0, "sqlname": sqlname,
               "typinput": proc_oid(name + "in"), "typoutput": proc_oid(name + "out"),
               "typreceive": proc_oid(name + "recv"), "typsend": proc_oid(name + "send"),
               "typalign": "c" if typlen in (1, 64) else "i",
               "typstorage": "p" if typlen > 0 else "x"}  # fmt: skip
        rows.append({**template, **own})
    return rows


def io_functions() -> list[tuple[str, int, int]]:
    """(function, argument type, result type) for each type's input/output/receive/send."""
    functions: dict[str, tuple[int, int]] = {}
    for oid, name, *_ in CATALOG_TYPES:
        functions[name + "in"] = (2275, oid)
        functions[name + "out"] = (oid, 2275)
        functions[name + "recv"] = (2281, oid)
        functions[name + "send"] = (oid, 17)
    for t in pgtypes.ALL_TYPES:
        if t.element is not None:
            names = ("array_in", "array_out", "array_recv", "array_send")
        else:
            names = (t.name + "in", t.name + "out", t.name + "recv", t.name + "send")
        functions.setdefault(names[0], (2275, t.oid))  # cstring -> type
        functions.setdefault(names[1], (t.oid, 2275))
        functions.setdefault(names[2], (2281, t.oid))  # internal -> type
        functions.setdefault(names[3], (t.oid, 17))  # type -> bytea
    return [(name, arg, result) for name, (arg, result) in sorted(functions.items())]


def _proc_table() -> pa.Table:
    rows = io_functions()
    n = len(rows)
    return pa.table(
        {
            "oid": pa.array([proc_oid(r[0]) for r in rows], pa.int64()),
            "proname": [r[0] for r in rows],
            "pronamespace": pa.array([PG_CATALOG_OID] * n, pa.int64()),
            "prorettype": pa.array([r[2] for r in rows], pa.int64()),
            "proargtypes": pa.array([[r[1]] for r in rows], pa.list_(pa.int64())),
        }
    )


# one part of a qualified name: "quoted" or plain, with spaces around
_PART = '(\\s*("([^"]|"")+"|[^".\\s]+)\\s*)'

_MACROS = f"""
CREATE MACRO {SCHEMA}.pg_get_partkeydef(o) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.pg_get_function_result(o) AS (
    SELECT {SCHEMA}.format_type(sb_p.prorettype, NULL) FROM {SCHEMA}.pg_proc sb_p
    WHERE sb_p.oid = o);
CREATE MACRO {SCHEMA}.pg_get_function_arguments(o) AS (
    SELECT COALESCE(string_agg(sb_t.sqlname, ', ' ORDER BY sb_a.i), '')
    FROM (SELECT unnest(sb_p.proargtypes) AS typ, generate_subscripts(sb_p.proargtypes, 1)
        AS i FROM {SCHEMA}.pg_proc sb_p WHERE sb_p.oid = o) sb_a
    JOIN {SCHEMA}.sb_types sb_t ON sb_t.oid = sb_a.typ);
CREATE MACRO {SCHEMA}.pg_get_function_identity_arguments(o) AS
    {SCHEMA}.pg_get_function_arguments(o);
CREATE MACRO {SCHEMA}.pg_is_wal_replay_paused() AS false;
CREATE MACRO {SCHEMA}.pg_database_size(d) AS 0::BIGINT;
CREATE MACRO {SCHEMA}.pg_stat_get_numscans(o) AS 0::BIGINT;
CREATE MACRO {SCHEMA}.pg_get_triggerdef(o) AS NULL::VARCHAR, (o, p) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.pg_get_ruledef(o) AS NULL::VARCHAR, (o, p) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.pg_get_functiondef(o) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.pg_tablespace_location(o) AS ''::VARCHAR;
CREATE MACRO {SCHEMA}.pg_size_pretty(b) AS CAST(b AS VARCHAR) || ' bytes';
CREATE MACRO {SCHEMA}.sb_parse_ident(x) AS CASE
    WHEN NOT regexp_full_match(trim(x), '{_PART}(\\.{_PART})*')
    THEN error('string is not a valid identifier: "' || x || '"')
    ELSE list_transform(
        regexp_extract_all(x, '"(?:[^"]|"")+"|[^".\\s]+'),
        sb_p -> CASE WHEN starts_with(sb_p, '"')
            THEN replace(sb_p[2:-2], '""', '"') ELSE lower(sb_p) END) END;
CREATE MACRO {SCHEMA}.parse_ident(x) AS {SCHEMA}.sb_parse_ident(x),
    (x, strict) AS {SCHEMA}.sb_parse_ident(x);
CREATE MACRO {SCHEMA}.sb_text(x) AS CASE WHEN x IS NULL THEN NULL
    WHEN typeof(x) = 'BOOLEAN' THEN CASE WHEN TRY_CAST(x AS BOOLEAN) THEN 't' ELSE 'f' END
    ELSE CAST(x AS VARCHAR) END;
CREATE MACRO {SCHEMA}.sb_quote_literal(x) AS CASE WHEN x IS NULL THEN 'NULL'
    WHEN contains({SCHEMA}.sb_text(x), '\\')
    THEN 'E''' || replace(replace({SCHEMA}.sb_text(x), '\\', '\\\\'), '''', '''''') || ''''
    ELSE '''' || replace({SCHEMA}.sb_text(x), '''', '''''') || '''' END;
CREATE MACRO {SCHEMA}.sb_pad(s, w, left_justified) AS CASE WHEN length(s) >= w THEN s
    WHEN left_justified THEN rpad(s, w, ' ') ELSE lpad(s, w, ' ') END;
CREATE MACRO {SCHEMA}.sb_format_ident(x) AS CASE WHEN x IS NULL
    THEN error('null values cannot be formatted as an SQL identifier')
    ELSE {SCHEMA}.quote_ident(CAST(x AS VARCHAR)) END;
CREATE MACRO {SCHEMA}.sb_settings(names, vals, units, vartypes, contexts) AS TABLE
    SELECT names[sb_i] AS name, vals[sb_i] AS setting, units[sb_i] AS unit,
        'Ungrouped' AS category, '' AS short_desc, NULL::VARCHAR AS extra_desc,
        contexts[sb_i] AS context, vartypes[sb_i] AS vartype,
        CASE WHEN contexts[sb_i] = 'internal' THEN 'default' ELSE 'session' END AS source,
        NULL::VARCHAR AS min_val, NULL::VARCHAR AS max_val, NULL::VARCHAR[] AS enumvals,
        vals[sb_i] AS boot_val, vals[sb_i] AS reset_val, NULL::VARCHAR AS sourcefile,
        NULL::INTEGER AS sourceline, false AS pending_restart
    FROM range(1, len(names) + 1) sb_r(sb_i);
CREATE MACRO {SCHEMA}.sb_database(dbname) AS TABLE
    SELECT 16384::BIGINT AS oid, dbname AS datname, {OWNER_OID}::BIGINT AS datdba,
    6 AS encoding, 'c' AS datlocprovider, false AS datistemplate, true AS datallowconn,
    -1 AS datconnlimit, 0::BIGINT AS datfrozenxid, 1::BIGINT AS datminmxid,
    1663::BIGINT AS dattablespace, 'C.UTF-8' AS datcollate, 'C.UTF-8' AS datctype,
    NULL::VARCHAR AS daticulocale, NULL::VARCHAR AS datcollversion, NULL::VARCHAR[] AS datacl;
"""

_VIEWS = f"""
CREATE VIEW {SCHEMA}.pg_tables AS SELECT n.nspname AS schemaname, c.relname AS tablename,
    {SCHEMA}.pg_get_userbyid(c.relowner) AS tableowner, NULL::VARCHAR AS tablespace,
    c.relhasindex AS hasindexes, c.relhasrules AS hasrules, c.relhastriggers AS hastriggers,
    c.relrowsecurity AS rowsecurity
    FROM {SCHEMA}.pg_class c JOIN {SCHEMA}.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p');
CREATE VIEW {SCHEMA}.pg_indexes AS SELECT n.nspname AS schemaname, c.relname AS tablename,
    i.relname AS indexname, NULL::VARCHAR AS tablespace, {SCHEMA}.pg_get_indexdef(i.oid)
    AS indexdef
    FROM {SCHEMA}.pg_index x JOIN {SCHEMA}.pg_class c ON c.oid = x.indrelid
    JOIN {SCHEMA}.pg_class i ON i.oid = x.indexrelid
    JOIN {SCHEMA}.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'm', 'p') AND i.relkind IN ('i', 'I');
CREATE VIEW {SCHEMA}.pg_stat_user_tables AS SELECT c.oid AS relid, n.nspname AS schemaname,
    c.relname, 0::BIGINT AS seq_scan, NULL::TIMESTAMPTZ AS last_seq_scan,
    0::BIGINT AS seq_tup_read, 0::BIGINT AS idx_scan, NULL::TIMESTAMPTZ AS last_idx_scan,
    0::BIGINT AS idx_tup_fetch, 0::BIGINT AS n_tup_ins, 0::BIGINT AS n_tup_upd,
    0::BIGINT AS n_tup_del, 0::BIGINT AS n_tup_hot_upd, 0::BIGINT AS n_live_tup,
    0::BIGINT AS n_dead_tup, 0::BIGINT AS n_mod_since_analyze, 0::BIGINT AS n_ins_since_vacuum,
    NULL::TIMESTAMPTZ AS last_vacuum, NULL::TIMESTAMPTZ AS last_autovacuum,
    NULL::TIMESTAMPTZ AS last_analyze, NULL::TIMESTAMPTZ AS last_autoanalyze,
    0::BIGINT AS vacuum_count, 0::BIGINT AS autovacuum_count, 0::BIGINT AS analyze_count,
    0::BIGINT AS autoanalyze_count
    FROM {SCHEMA}.pg_class c JOIN {SCHEMA}.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'm')
      AND n.nspname NOT IN ('pg_catalog', 'information_schema');
"""

# Relations this module adds to pg_catalog (the rewriter points them at SCHEMA).
RELATIONS = frozenset({"pg_proc", "pg_range", "pg_tables", "pg_indexes", "pg_stat_user_tables"})
FUNCTIONS = frozenset(
    {
        "pg_get_partkeydef",
        "pg_get_function_result",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
        "pg_is_wal_replay_paused",
        "pg_database_size",
        "pg_stat_get_numscans",
        "pg_get_triggerdef",
        "pg_get_ruledef",
        "pg_get_functiondef",
        "pg_tablespace_location",
        "pg_size_pretty",
        "parse_ident",
    }
)


def install_relations(conn: duckdb.DuckDBPyConnection) -> None:
    """Create pg_proc and pg_range (before the macros that read them)."""
    conn.execute(f"CREATE TABLE {SCHEMA}.pg_proc ({_PROC_COLUMNS})")
    procs = _proc_table()
    conn.register("sb_proc_rows", procs)
    try:
        names = ", ".join(procs.column_names)
        conn.execute(f"INSERT INTO {SCHEMA}.pg_proc ({names}) SELECT {names} FROM sb_proc_rows")
    finally:
        conn.unregister("sb_proc_rows")
    conn.execute(
        f"UPDATE {SCHEMA}.pg_proc SET proowner = {OWNER_OID}, prolang = 12, procost = 1, "
        f"prorows = 0, provariadic = 0, prosupport = 0, prokind = 'f', prosecdef = false, "
        f"proleakproof = false, proisstrict = true, proretset = false, provolatile = 'i', "
        f"proparallel = 's', pronargs = 1, pronargdefaults = 0, prosrc = proname"
    )
    conn.execute(
        f"CREATE TABLE {SCHEMA}.pg_range (rngtypid BIGINT, rngsubtype BIGINT, "
        f"rngmultitypid BIGINT, rngcollation BIGINT, rngsubopc BIGINT, rngcanonical BIGINT, "
        f"rngsubdiff BIGINT)"
    )


def install(conn: duckdb.DuckDBPyConnection) -> None:
    """Create this module's views and macros (after `catalog.install`'s macros)."""
    conn.execute(_MACROS)
    conn.execute(_VIEWS)


def _vartype(name: str, value: str) -> str:
    if name in _INTEGER_SETTINGS:
        return "integer"
    if name in _BOOL_SETTINGS:
        return "bool"
    return "string"


def settings_rows(settings: Mapping[str, str]) -> list[tuple[str, str, str | None, str, str]]:
    """(name, setting, unit, vartype, context) rows of pg_settings for a session's settings."""
    merged = {**SERVER_SETTINGS, **settings}
    rows = []
    for name, value in sorted(merged.items()):
        shown = display_name(name)
        setting = value
        if name == "work_mem" and value.endswith("MB"):
            setting = str(int(value[:-2]) * 1024)
        context = "internal" if name in _FIXED_SETTINGS else "user"
        rows.append((shown, setting, _UNITS.get(name), _vartype(name, value), context))
    return rows


def display_name(name: str) -> str:
    return {"datestyle": "DateStyle", "timezone": "TimeZone",
            "intervalstyle": "IntervalStyle"}.get(name, name)  # fmt: skip


def known_settings(settings: Mapping[str, str]) -> Iterable[tuple[str, str]]:
    """Every (lowercase name, value) current_setting() answers for a session."""
    return sorted({**SERVER_SETTINGS, **settings}.items())
