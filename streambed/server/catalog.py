"""pg_catalog and information_schema compatibility for psql, pgjdbc and SQLAlchemy.

DuckDB's own pg_catalog describes DuckDB objects (our tables are views there, so `\\dt`
shows nothing). We keep a Postgres-shaped catalog in the schema `sb_pg` (and
`sb_information_schema`), rebuilt in the same transaction as the views on each refresh,
and `streambed.server.rewrite` points catalog references of client queries at it:

- relations: pg_class, pg_namespace, pg_attribute, pg_type, pg_index, pg_constraint,
  pg_database, pg_roles/pg_user, and empty relations clients join against (pg_am,
  pg_attrdef, pg_description, pg_inherits, pg_policy, pg_statistic_ext, pg_publication*, ...);
- functions as DuckDB macros: format_type, pg_get_userbyid, pg_table_is_visible,
  pg_get_expr, obj_description, col_description, pg_get_indexdef, pg_get_constraintdef,
  pg_encoding_to_char, has_*_privilege, reg* casts (regclass_oid / regclass_name, ...).

Replicated tables appear as ordinary tables (relkind 'r'); a primary key (from the Iceberg
table's identifier fields) appears as a unique index `<table>_pkey` and a 'p' constraint.
Columns have the source's declared types and NOT NULL, and foreign keys between served
tables are 'f' constraints, where the lake table records them (`streambed.lake.declared`,
`streambed.server.foreign_keys`).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from streambed.lake.declared import ForeignKey
from streambed.server import catalog_tools, pgtypes
from streambed.server.foreign_keys import Served, foreign_key_rows

SCHEMA = "sb_pg"
DATABASE_VARIABLE = "sb_database"  # DuckDB variable: the database a session connected to
INFO_SCHEMA = "sb_information_schema"
OWNER = "streambed"
OWNER_OID = 10
PG_CATALOG_OID = 11
PUBLIC_OID = 2200
INFORMATION_SCHEMA_OID = 13_000
# pg_am oids by relkind: tables are heap, indexes btree
ACCESS_METHODS = {"r": 2, "i": 403}

# System relations that get a pg_class row (so 'pg_class'::regclass works), with real oids.
SYSTEM_RELATIONS = {
    "pg_type": 1247,
    "pg_attribute": 1249,
    "pg_proc": 1255,
    "pg_class": 1259,
    "pg_database": 1262,
    "pg_constraint": 2606,
    "pg_description": 2609,
    "pg_index": 2610,
    "pg_namespace": 2615,
}

# relation name -> column definitions for catalog relations that are always empty here.
_EMPTY: dict[str, str] = {
    "pg_am": "oid BIGINT, amname VARCHAR, amhandler VARCHAR, amtype VARCHAR",
    "pg_opclass": "oid BIGINT, opcmethod BIGINT, opcname VARCHAR, opcnamespace BIGINT, "
    "opcowner BIGINT, opcfamily BIGINT, opcintype BIGINT, opcdefault BOOLEAN, opckeytype BIGINT",
    "pg_attrdef": "oid BIGINT, adrelid BIGINT, adnum SMALLINT, adbin VARCHAR",
    "pg_collation": "oid BIGINT, collname VARCHAR, collnamespace BIGINT, collprovider VARCHAR",
    "pg_description": "objoid BIGINT, classoid BIGINT, objsubid INTEGER, description VARCHAR",
    "pg_shdescription": "objoid BIGINT, classoid BIGINT, description VARCHAR",
    "pg_inherits": "inhrelid BIGINT, inhparent BIGINT, inhseqno INTEGER, inhdetachpending BOOLEAN",
    "pg_policy": "oid BIGINT, polname VARCHAR, polrelid BIGINT, polcmd VARCHAR, "
    "polpermissive BOOLEAN, polroles BIGINT[], polqual VARCHAR, polwithcheck VARCHAR",
    "pg_statistic_ext": "oid BIGINT, stxrelid BIGINT, stxname VARCHAR, stxnamespace BIGINT, "
    "stxowner BIGINT, stxstattarget INTEGER, stxkeys SMALLINT[], stxkind VARCHAR[]",
    "pg_publication": "oid BIGINT, pubname VARCHAR, puballtables BOOLEAN",
    "pg_publication_namespace": "oid BIGINT, pnpubid BIGINT, pnnspid BIGINT",
    "pg_publication_rel": "oid BIGINT, prpubid BIGINT, prrelid BIGINT, prqual VARCHAR, "
    "prattrs SMALLINT[]",
    "pg_sequence": "seqrelid BIGINT, seqtypid BIGINT, seqstart BIGINT, seqincrement BIGINT, "
    "seqmax BIGINT, seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN",
    "pg_trigger": "oid BIGINT, tgrelid BIGINT, tgname VARCHAR, tgenabled VARCHAR, "
    "tgisinternal BOOLEAN, tgconstraint BIGINT, tgparentid BIGINT",
    "pg_rewrite": "oid BIGINT, rulename VARCHAR, ev_class BIGINT, ev_type VARCHAR",
    "pg_depend": "classid BIGINT, objid BIGINT, objsubid INTEGER, refclassid BIGINT, "
    "refobjid BIGINT, refobjsubid INTEGER, deptype VARCHAR",
    "pg_enum": "oid BIGINT, enumtypid BIGINT, enumsortorder DOUBLE, enumlabel VARCHAR",
    "pg_extension": "oid BIGINT, extname VARCHAR, extowner BIGINT, extnamespace BIGINT, "
    "extversion VARCHAR",
    "pg_foreign_table": "ftrelid BIGINT, ftserver BIGINT",
    "pg_partitioned_table": "partrelid BIGINT, partstrat VARCHAR",
    "pg_event_trigger": "oid BIGINT, evtname VARCHAR",
    "pg_matviews": "schemaname VARCHAR, matviewname VARCHAR, definition VARCHAR",
    "pg_views": "schemaname VARCHAR, viewname VARCHAR, viewowner VARCHAR, definition VARCHAR",
    "pg_tablespace": "oid BIGINT, spcname VARCHAR, spcowner BIGINT",
    "pg_auth_members": "roleid BIGINT, member BIGINT, grantor BIGINT",
}

_DYNAMIC = (
    "pg_namespace",
    "pg_class",
    "pg_attribute",
    "pg_index",
    "pg_constraint",
    "sb_indexdefs",
)
_VIEWS = ("pg_roles", "pg_user", "pg_database", "pg_settings", "pg_type")

CATALOG_RELATIONS = frozenset(
    set(_EMPTY) | set(_DYNAMIC) | set(_VIEWS) | catalog_tools.RELATIONS
) - {"sb_indexdefs"}
INFORMATION_SCHEMA_RELATIONS = frozenset(
    {
        "tables",
        "columns",
        "schemata",
        "table_constraints",
        "key_column_usage",
        "referential_constraints",
        "views",
    }
)

COMPAT_FUNCTIONS = frozenset(
    {
        "format_type",
        "pg_get_userbyid",
        "pg_table_is_visible",
        "pg_type_is_visible",
        "pg_function_is_visible",
        "pg_collation_is_visible",
        "pg_get_expr",
        "obj_description",
        "col_description",
        "shobj_description",
        "pg_get_indexdef",
        "pg_get_constraintdef",
        "pg_partition_ancestors",
        "pg_get_viewdef",
        "pg_encoding_to_char",
        "pg_get_serial_sequence",
        "pg_relation_is_publishable",
        "pg_get_statisticsobjdef_columns",
        "has_table_privilege",
        "has_schema_privilege",
        "has_database_privilege",
        "has_column_privilege",
        "pg_relation_size",
        "pg_total_relation_size",
        "pg_table_size",
        "pg_is_in_recovery",
        "array_upper",
        "array_lower",
        "quote_ident",
        "regclass_oid",
        "regclass_name",
        "regtype_oid",
        "regtype_name",
        "regnamespace_oid",
        "regnamespace_name",
        "regproc_oid",
        "regproc_name",
        "regprocedure_oid",
        "regprocedure_name",
        "regrole_oid",
        "regrole_name",
        "regoper_oid",
        "regoper_name",
        "to_regclass",
        "to_regtype",
        "json_build_object",
        "jsonb_build_object",
        *catalog_tools.FUNCTIONS,
    }
)
SESSION_FUNCTIONS = frozenset(
    {
        "version",
        "current_database",
        "current_schema",
        "current_schemas",
        "pg_backend_pid",
        "current_setting",
    }
)


@dataclass(frozen=True)
class ColumnDef:
    name: str
    duckdb_type: str
    not_null: bool = False
    declared: pgtypes.PgType | None = None  # the source's type, when clients should see it

    @property
    def pg_type(self) -> pgtypes.PgType:
        return self.declared or pgtypes.pg_type_for_duckdb(self.duckdb_type)


@dataclass(frozen=True)
class CatalogTable:
    """One replicated table as the catalog shows it."""

    schema: str
    name: str
    columns: tuple[ColumnDef, ...]
    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()

    @property
    def oid(self) -> int:
        return stable_oid("table", self.schema, self.name)


def stable_oid(*parts: str) -> int:
    """A deterministic oid in the user range, stable across refreshes and restarts."""
    return 16_384 + zlib.crc32("\x00".join(parts).encode()) % 2_000_000_000


def namespace_oid(schema: str) -> int:
    fixed = {"pg_catalog": PG_CATALOG_OID, "public": PUBLIC_OID}
    fixed["information_schema"] = INFORMATION_SCHEMA_OID
    return fixed.get(schema) or stable_oid("namespace", schema)


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _type_rows() -> pa.Table:
    rows: dict[str, list[object]] = {
        k: []
        for k in [
            "oid",
            "typname",
            "typnamespace",
            "typowner",
            "typlen",
            "typbyval",
            "typtype",
            "typcategory",
            "typisdefined",
            "typdelim",
            "typrelid",
            "typelem",
            "typarray",
            "typbasetype",
            "typtypmod",
            "typndims",
            "typcollation",
            "typnotnull",
            "typinput",
            "typoutput",
            "typreceive",
            "typsend",
            "typalign",
            "typstorage",
            "typdefault",
            "sqlname",
        ]
    }
    proc = catalog_tools.proc_oid
    array_oids = {
        t.element.oid: t.oid
        for t in pgtypes.ALL_TYPES
        if t.element is not None and t.oid not in pgtypes.VECTOR_OIDS
    }
    for t in pgtypes.ALL_TYPES:
        element = t.element
        is_array = element is not None and t.oid not in pgtypes.VECTOR_OIDS
        collatable = (element or t).oid in (25, 1043)
        category = "A" if element else _CATEGORY.get(t.name, "U")
        values: dict[str, object] = {
            "oid": t.oid,
            "typname": t.name,
            "typnamespace": PG_CATALOG_OID,
            "typowner": OWNER_OID,
            "typlen": t.typlen,
            "typbyval": t.typlen in (1, 2, 4, 8) and element is None,
            "typtype": "b",
            "typcategory": category,
            "typisdefined": True,
            "typdelim": ",",
            "typrelid": 0,
            "typelem": element.oid if element else 0,
            "typarray": array_oids.get(t.oid, 0),
            "typbasetype": 0,
            "typtypmod": -1,
            "typndims": 0,
            "typcollation": 100 if collatable else 0,
            "typnotnull": False,
            # regproc columns: oids of pg_proc rows (catalog_tools)
            # (int2vector and oidvector have elements but functions of their own)
            "typinput": proc("array_in" if is_array else t.name + "in"),
            "typoutput": proc("array_out" if is_array else t.name + "out"),
            "typreceive": proc("array_recv" if is_array else t.name + "recv"),
            "typsend": proc("array_send" if is_array else t.name + "send"),
            "typalign": "d" if t.typlen == 8 else "i",
            "typstorage": "p" if t.typlen > 0 else "x",
            "typdefault": None,
            "sqlname": t.format_type(),
        }
        for key, value in values.items():
            rows[key].append(value)
    for row in catalog_tools.catalog_type_rows(values):
        for key, value in row.items():
            rows[key].append(value)
    return pa.table(rows)


_CATEGORY = {
    "bool": "B",
    "int2": "N",
    "int4": "N",
    "int8": "N",
    "oid": "N",
    "float4": "N",
    "float8": "N",
    "numeric": "N",
    "text": "S",
    "varchar": "S",
    "date": "D",
    "time": "D",
    "timetz": "D",
    "timestamp": "D",
    "timestamptz": "D",
    "interval": "T",
}

_MACROS = f"""
CREATE MACRO {SCHEMA}.pg_get_userbyid(o) AS '{OWNER}';
CREATE MACRO {SCHEMA}.pg_table_is_visible(o) AS (
    SELECT sb_vn.nspname = 'pg_catalog'
        OR list_contains(string_split(current_setting('search_path'), ','), sb_vn.nspname)
    FROM {SCHEMA}.pg_class sb_vc JOIN {SCHEMA}.pg_namespace sb_vn
        ON sb_vn.oid = sb_vc.relnamespace
    WHERE sb_vc.oid = o);
CREATE MACRO {SCHEMA}.pg_type_is_visible(o) AS true;
CREATE MACRO {SCHEMA}.pg_function_is_visible(o) AS true;
CREATE MACRO {SCHEMA}.pg_collation_is_visible(o) AS true;
CREATE MACRO {SCHEMA}.sb_typmod_name(e, m) AS CASE
    WHEN e = 1700 AND m >= 4 THEN 'numeric(' || ((m - 4) >> 16) || ',' || ((m - 4) & 65535) || ')'
    WHEN e = 1043 AND m >= 4 THEN 'character varying(' || (m - 4) || ')'
    WHEN e = 1042 AND m >= 4 THEN 'character(' || (m - 4) || ')'
    WHEN e = 1114 AND m >= 0 THEN 'timestamp(' || m || ') without time zone'
    WHEN e = 1184 AND m >= 0 THEN 'timestamp(' || m || ') with time zone'
    WHEN e = 1083 AND m >= 0 THEN 'time(' || m || ') without time zone'
    WHEN e = 1266 AND m >= 0 THEN 'time(' || m || ') with time zone'
    WHEN e = 1560 AND m >= 0 THEN 'bit(' || m || ')'
    WHEN e = 1562 AND m >= 0 THEN 'bit varying(' || m || ')'
    END;
CREATE MACRO {SCHEMA}.format_type(t, m) AS (
    SELECT CASE
        WHEN sb_x.typelem <> 0 AND sb_x.typcategory = 'A' AND t NOT IN (22, 30)
            THEN COALESCE({SCHEMA}.sb_typmod_name(sb_x.typelem, m) || '[]', sb_x.sqlname)
        WHEN t = 1042 AND m IS NOT NULL AND m < 0 THEN 'bpchar'
        ELSE COALESCE({SCHEMA}.sb_typmod_name(sb_x.oid, m), sb_x.sqlname) END
    FROM {SCHEMA}.sb_types sb_x WHERE sb_x.oid = t);
CREATE MACRO {SCHEMA}.pg_get_expr(e, r) AS NULL::VARCHAR, (e, r, p) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.obj_description(o) AS NULL::VARCHAR, (o, c) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.shobj_description(o, c) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.col_description(o, n) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.pg_get_indexdef(o) AS
    (SELECT sb_d.indexdef FROM {SCHEMA}.sb_indexdefs sb_d WHERE sb_d.oid = o),
    (o, c, p) AS (SELECT CASE WHEN c = 0 THEN sb_d.indexdef
        ELSE string_split(regexp_extract(sb_d.indexdef, '\\(([^()]*)\\)$', 1), ', ')[c] END
        FROM {SCHEMA}.sb_indexdefs sb_d WHERE sb_d.oid = o);
CREATE MACRO {SCHEMA}.pg_get_constraintdef(o) AS
    (SELECT sb_d.condef FROM {SCHEMA}.sb_indexdefs sb_d WHERE sb_d.conoid = o),
    (o, p) AS (SELECT sb_d.condef FROM {SCHEMA}.sb_indexdefs sb_d WHERE sb_d.conoid = o);
CREATE MACRO {SCHEMA}.pg_get_viewdef(o) AS NULL::VARCHAR, (o, p) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.pg_encoding_to_char(e) AS 'UTF8';
CREATE MACRO {SCHEMA}.pg_get_serial_sequence(t, c) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.pg_relation_is_publishable(r) AS false;
CREATE MACRO {SCHEMA}.pg_get_statisticsobjdef_columns(o) AS NULL::VARCHAR;
CREATE MACRO {SCHEMA}.has_table_privilege(a, b) AS true, (a, b, c) AS true;
CREATE MACRO {SCHEMA}.has_schema_privilege(a, b) AS true, (a, b, c) AS true;
CREATE MACRO {SCHEMA}.has_database_privilege(a, b) AS true, (a, b, c) AS true;
CREATE MACRO {SCHEMA}.has_column_privilege(a, b, c) AS true, (a, b, c, d) AS true;
CREATE MACRO {SCHEMA}.pg_relation_size(r) AS 0::BIGINT, (r, f) AS 0::BIGINT;
CREATE MACRO {SCHEMA}.pg_total_relation_size(r) AS 0::BIGINT;
CREATE MACRO {SCHEMA}.pg_table_size(r) AS 0::BIGINT;
CREATE MACRO {SCHEMA}.pg_is_in_recovery() AS false;
CREATE MACRO {SCHEMA}.array_upper(a, d) AS CASE WHEN len(a) > 0 THEN len(a) END;
CREATE MACRO {SCHEMA}.array_lower(a, d) AS CASE WHEN len(a) > 0 THEN 1 END;
CREATE MACRO {SCHEMA}.json_build_object(a, b) AS json_object(a::VARCHAR, b),
    (a, b, c, d) AS json_object(a::VARCHAR, b, c::VARCHAR, d),
    (a, b, c, d, e, f) AS json_object(a::VARCHAR, b, c::VARCHAR, d, e::VARCHAR, f),
    (a, b, c, d, e, f, g, h) AS json_object(a::VARCHAR, b, c::VARCHAR, d, e::VARCHAR, f,
        g::VARCHAR, h),
    (a, b, c, d, e, f, g, h, i, j) AS json_object(a::VARCHAR, b, c::VARCHAR, d, e::VARCHAR, f,
        g::VARCHAR, h, i::VARCHAR, j),
    (a, b, c, d, e, f, g, h, i, j, k, l) AS json_object(a::VARCHAR, b, c::VARCHAR, d,
        e::VARCHAR, f, g::VARCHAR, h, i::VARCHAR, j, k::VARCHAR, l);
CREATE MACRO {SCHEMA}.jsonb_build_object(a, b) AS json_object(a::VARCHAR, b),
    (a, b, c, d) AS json_object(a::VARCHAR, b, c::VARCHAR, d);
CREATE MACRO {SCHEMA}.sb_expandarray(a) AS
    list_transform(generate_series(1, len(a)), i -> {{'x': a[i], 'n': i}});
CREATE MACRO {SCHEMA}.sb_divisor(b, a) AS
    CASE WHEN b = 0 AND a IS NOT NULL THEN error('division by zero') ELSE b END;
CREATE MACRO {SCHEMA}.quote_ident(x) AS CASE
    WHEN regexp_full_match(x, '[a-z_][a-z0-9_$]*')
        AND NOT list_contains({catalog_tools.QUOTED_KEYWORDS_SQL}, x) THEN x
    ELSE '"' || replace(x, '"', '""') || '"' END;
CREATE MACRO {SCHEMA}.sb_last_ident(x) AS
    replace(string_split(CAST(x AS VARCHAR), '.')[-1], '"', '');
CREATE MACRO {SCHEMA}.sb_first_ident(x) AS CASE
    WHEN len(string_split(CAST(x AS VARCHAR), '.')) > 1
    THEN replace(string_split(CAST(x AS VARCHAR), '.')[1], '"', '') END;
CREATE MACRO {SCHEMA}.regclass_oid(x) AS COALESCE(
    TRY_CAST(CAST(x AS VARCHAR) AS BIGINT),
    (SELECT min(sb_c.oid) FROM {SCHEMA}.pg_class sb_c
        JOIN {SCHEMA}.pg_namespace sb_n ON sb_n.oid = sb_c.relnamespace
     WHERE sb_c.relname = {SCHEMA}.sb_last_ident(x)
       AND (sb_n.nspname = {SCHEMA}.sb_first_ident(x)
            OR ({SCHEMA}.sb_first_ident(x) IS NULL AND {SCHEMA}.pg_table_is_visible(sb_c.oid)))));
CREATE MACRO {SCHEMA}.to_regclass(x) AS {SCHEMA}.regclass_oid(x);
CREATE MACRO {SCHEMA}.pg_partition_ancestors(r) AS TABLE
    SELECT {SCHEMA}.regclass_oid(r) AS relid, 1::BIGINT AS depth;
CREATE MACRO {SCHEMA}.regclass_name(x) AS (
    SELECT CASE WHEN {SCHEMA}.pg_table_is_visible(sb_c.oid) THEN sb_c.relname
        ELSE sb_n.nspname || '.' || sb_c.relname END
    FROM {SCHEMA}.pg_class sb_c JOIN {SCHEMA}.pg_namespace sb_n ON sb_n.oid = sb_c.relnamespace
    WHERE sb_c.oid = TRY_CAST(x AS BIGINT));
CREATE MACRO {SCHEMA}.regtype_oid(x) AS COALESCE(
    TRY_CAST(CAST(x AS VARCHAR) AS BIGINT),
    (SELECT min(sb_t.oid) FROM {SCHEMA}.sb_types sb_t
     WHERE sb_t.typname = {SCHEMA}.sb_last_ident(x) OR sb_t.sqlname = {SCHEMA}.sb_last_ident(x)));
CREATE MACRO {SCHEMA}.to_regtype(x) AS (SELECT min(sb_t.oid) FROM {SCHEMA}.sb_types sb_t
    WHERE sb_t.typname = {SCHEMA}.sb_last_ident(x) OR sb_t.sqlname = {SCHEMA}.sb_last_ident(x));
CREATE MACRO {SCHEMA}.regtype_name(x) AS {SCHEMA}.format_type(TRY_CAST(x AS BIGINT), -1);
CREATE MACRO {SCHEMA}.regnamespace_oid(x) AS COALESCE(
    TRY_CAST(CAST(x AS VARCHAR) AS BIGINT),
    (SELECT min(sb_n.oid) FROM {SCHEMA}.pg_namespace sb_n
     WHERE sb_n.nspname = {SCHEMA}.sb_last_ident(x)));
CREATE MACRO {SCHEMA}.regnamespace_name(x) AS
    (SELECT sb_n.nspname FROM {SCHEMA}.pg_namespace sb_n WHERE sb_n.oid = TRY_CAST(x AS BIGINT));
CREATE MACRO {SCHEMA}.regproc_oid(x) AS COALESCE(TRY_CAST(CAST(x AS VARCHAR) AS BIGINT),
    (SELECT min(sb_p.oid) FROM {SCHEMA}.pg_proc sb_p
     WHERE sb_p.proname = {SCHEMA}.sb_last_ident(x)));
CREATE MACRO {SCHEMA}.regproc_name(x) AS COALESCE((SELECT min(sb_p.proname)
    FROM {SCHEMA}.pg_proc sb_p WHERE sb_p.oid = TRY_CAST(x AS BIGINT)), CAST(x AS VARCHAR));
CREATE MACRO {SCHEMA}.regprocedure_oid(x) AS TRY_CAST(CAST(x AS VARCHAR) AS BIGINT);
CREATE MACRO {SCHEMA}.regprocedure_name(x) AS CAST(x AS VARCHAR);
CREATE MACRO {SCHEMA}.regoper_oid(x) AS TRY_CAST(CAST(x AS VARCHAR) AS BIGINT);
CREATE MACRO {SCHEMA}.regoper_name(x) AS CAST(x AS VARCHAR);
CREATE MACRO {SCHEMA}.regrole_oid(x) AS {OWNER_OID};
CREATE MACRO {SCHEMA}.regrole_name(x) AS '{OWNER}';
"""


def _static_views(database: str) -> str:
    s = SCHEMA
    return f"""
CREATE VIEW {s}.pg_type AS SELECT oid, typname, typnamespace, typowner, typlen, typbyval,
    typtype, typcategory, typcategory IN ('B', 'S') OR oid IN (701, 1184) AS typispreferred,
    typisdefined, typdelim, typrelid, CASE WHEN typelem <> 0 THEN 6179 ELSE 0 END::BIGINT
    AS typsubscript, typelem, typarray, typinput, typoutput, typreceive, typsend,
    0::BIGINT AS typmodin, 0::BIGINT AS typmodout, 0::BIGINT AS typanalyze, typalign,
    typstorage, typnotnull, typbasetype, typtypmod, typndims, typcollation,
    NULL::VARCHAR AS typdefaultbin, typdefault, NULL::VARCHAR[] AS typacl FROM {s}.sb_types;
CREATE VIEW {s}.pg_roles AS SELECT {OWNER_OID}::BIGINT AS oid, '{OWNER}' AS rolname,
    true AS rolsuper, false AS rolinherit, false AS rolcreaterole, false AS rolcreatedb,
    true AS rolcanlogin, false AS rolreplication, -1 AS rolconnlimit,
    '********' AS rolpassword, NULL::TIMESTAMPTZ AS rolvaliduntil, false AS rolbypassrls,
    NULL::VARCHAR[] AS rolconfig;
CREATE VIEW {s}.pg_user AS SELECT '{OWNER}' AS usename, {OWNER_OID}::BIGINT AS usesysid,
    false AS usecreatedb, true AS usesuper, false AS userepl, false AS usebypassrls;
CREATE VIEW {s}.pg_database AS SELECT 16384::BIGINT AS oid, {_q(database)} AS datname,
    {OWNER_OID}::BIGINT AS datdba, 6 AS encoding, 'c' AS datlocprovider,
    false AS datistemplate, true AS datallowconn, -1 AS datconnlimit,
    'C.UTF-8' AS datcollate, 'C.UTF-8' AS datctype, NULL::VARCHAR AS daticulocale,
    NULL::VARCHAR AS datcollversion, NULL::VARCHAR[] AS datacl, 1663::BIGINT AS dattablespace;
CREATE VIEW {s}.pg_settings AS SELECT 'max_index_keys' AS name, '32' AS setting,
    NULL::VARCHAR AS unit, 'Preset Options' AS category,
    'Shows the maximum number of index keys.' AS short_desc, NULL::VARCHAR AS extra_desc,
    'internal' AS context, 'integer' AS vartype, 'default' AS source;
"""


def install(conn: duckdb.DuckDBPyConnection, database: str) -> None:
    """Create the compatibility schemas, static relations and macros (once, at startup)."""
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {INFO_SCHEMA}")
    types = _type_rows()
    conn.register("sb_type_rows", types)
    conn.execute(f"CREATE TABLE {SCHEMA}.sb_types AS SELECT * FROM sb_type_rows")
    conn.unregister("sb_type_rows")
    for name, columns in _EMPTY.items():
        conn.execute(f"CREATE TABLE {SCHEMA}.{name} ({columns})")
    catalog_tools.install_relations(conn)
    # tables are heap, primary key indexes btree (pgjdbc's getIndexInfo joins pg_am)
    conn.execute(
        f"INSERT INTO {SCHEMA}.pg_am VALUES (2, 'heap', 'heap_tableam_handler', 't'), "
        f"(403, 'btree', 'bthandler', 'i')"
    )
    rebuild(conn, [], database)
    conn.execute(_static_views(database))
    conn.execute(_MACROS)
    conn.execute(_information_schema(database))
    catalog_tools.install(conn)


def _table(
    conn: duckdb.DuckDBPyConnection, name: str, rows: dict[str, list[object]], schema: pa.Schema
) -> None:
    data = pa.table({k: pa.array(v, type=schema.field(k).type) for k, v in rows.items()})
    view = f"sb_rows_{name}"
    conn.register(view, data)
    try:
        conn.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.{name} AS SELECT * FROM {view}")
    finally:
        conn.unregister(view)


_I64 = pa.int64()
_I32 = pa.int32()
_I16 = pa.int16()
_STR = pa.string()
_BOOL = pa.bool_()

_NAMESPACE = pa.schema(
    [("oid", _I64), ("nspname", _STR), ("nspowner", _I64), ("nspacl", pa.list_(_STR))]
)
_CLASS = pa.schema(
    [
        ("oid", _I64), ("relname", _STR), ("relnamespace", _I64), ("reltype", _I64),
        ("reloftype", _I64), ("relowner", _I64), ("relam", _I64), ("relfilenode", _I64),
        ("reltablespace", _I64), ("relpages", _I32), ("reltuples", pa.float32()),
        ("relallvisible", _I32), ("reltoastrelid", _I64), ("relhasindex", _BOOL),
        ("relisshared", _BOOL), ("relpersistence", _STR), ("relkind", _STR), ("relnatts", _I16),
        ("relchecks", _I16), ("relhasrules", _BOOL), ("relhastriggers", _BOOL),
        ("relhassubclass", _BOOL), ("relrowsecurity", _BOOL), ("relforcerowsecurity", _BOOL),
        ("relispopulated", _BOOL), ("relreplident", _STR), ("relispartition", _BOOL),
        ("relrewrite", _I64), ("relacl", pa.list_(_STR)), ("reloptions", pa.list_(_STR)),
        ("relpartbound", _STR),
    ]
)  # fmt: skip
_ATTRIBUTE = pa.schema(
    [
        ("attrelid", _I64), ("attname", _STR), ("atttypid", _I64), ("attstattarget", _I32),
        ("attlen", _I16), ("attnum", _I16), ("attndims", _I32), ("attcacheoff", _I32),
        ("atttypmod", _I32), ("attbyval", _BOOL), ("attalign", _STR), ("attstorage", _STR),
        ("attcompression", _STR), ("attnotnull", _BOOL), ("atthasdef", _BOOL),
        ("atthasmissing", _BOOL), ("attidentity", _STR), ("attgenerated", _STR),
        ("attisdropped", _BOOL), ("attislocal", _BOOL), ("attinhcount", _I32),
        ("attcollation", _I64), ("attacl", pa.list_(_STR)), ("attoptions", pa.list_(_STR)),
        ("attfdwoptions", pa.list_(_STR)),
    ]
)  # fmt: skip
_INDEX = pa.schema(
    [
        ("indexrelid", _I64), ("indrelid", _I64), ("indnatts", _I16), ("indnkeyatts", _I16),
        ("indisunique", _BOOL), ("indnullsnotdistinct", _BOOL), ("indisprimary", _BOOL),
        ("indisexclusion", _BOOL), ("indimmediate", _BOOL), ("indisclustered", _BOOL),
        ("indisvalid", _BOOL), ("indcheckxmin", _BOOL), ("indisready", _BOOL),
        ("indislive", _BOOL), ("indisreplident", _BOOL), ("indkey", pa.list_(_I16)),
        ("indcollation", pa.list_(_I64)), ("indclass", pa.list_(_I64)),
        ("indoption", pa.list_(_I16)), ("indexprs", _STR), ("indpred", _STR),
    ]
)  # fmt: skip
_CONSTRAINT = pa.schema(
    [
        ("oid", _I64), ("conname", _STR), ("connamespace", _I64), ("contype", _STR),
        ("condeferrable", _BOOL), ("condeferred", _BOOL), ("convalidated", _BOOL),
        ("conrelid", _I64), ("contypid", _I64), ("conindid", _I64), ("conparentid", _I64),
        ("confrelid", _I64), ("confupdtype", _STR), ("confdeltype", _STR),
        ("confmatchtype", _STR), ("conislocal", _BOOL), ("coninhcount", _I32),
        ("connoinherit", _BOOL), ("conkey", pa.list_(_I16)), ("confkey", pa.list_(_I16)),
        ("conbin", _STR),
    ]
)  # fmt: skip
_INDEXDEFS = pa.schema([("oid", _I64), ("conoid", _I64), ("indexdef", _STR), ("condef", _STR)])


def _rows(schema: pa.Schema) -> dict[str, list[object]]:
    return {name: [] for name in schema.names}


def _add(rows: dict[str, list[object]], **values: object) -> None:
    for key, column in rows.items():
        column.append(values.get(key))


def _class_row(
    oid: int, name: str, namespace: int, kind: str, natts: int, has_index: bool
) -> dict[str, object]:
    return {
        "oid": oid, "relname": name, "relnamespace": namespace, "reltype": 0, "reloftype": 0,
        "relowner": OWNER_OID, "relam": ACCESS_METHODS.get(kind, 0), "relfilenode": oid,
        "reltablespace": 0,
        "relpages": 0, "reltuples": -1.0, "relallvisible": 0, "reltoastrelid": 0,
        "relhasindex": has_index, "relisshared": False, "relpersistence": "p", "relkind": kind,
        "relnatts": natts, "relchecks": 0, "relhasrules": False, "relhastriggers": False,
        "relhassubclass": False, "relrowsecurity": False, "relforcerowsecurity": False,
        "relispopulated": True, "relreplident": "d", "relispartition": False, "relrewrite": 0,
        "relacl": None, "reloptions": None, "relpartbound": None,
    }  # fmt: skip


def rebuild(conn: duckdb.DuckDBPyConnection, tables: Sequence[CatalogTable], database: str) -> None:
    """Replace the dynamic catalog relations with rows for `tables` (inside the caller's
    transaction, so they switch together with the views)."""
    del database
    namespaces = _rows(_NAMESPACE)
    schemas = ["pg_catalog", "information_schema", "public"]
    schemas += sorted({t.schema for t in tables} - set(schemas))
    for schema in schemas:
        _add(namespaces, oid=namespace_oid(schema), nspname=schema, nspowner=OWNER_OID)
    classes = _rows(_CLASS)
    attributes = _rows(_ATTRIBUTE)
    indexes = _rows(_INDEX)
    constraints = _rows(_CONSTRAINT)
    defs = _rows(_INDEXDEFS)
    for name, oid in SYSTEM_RELATIONS.items():
        _add(classes, **_class_row(oid, name, PG_CATALOG_OID, "r", 0, False))
    served: dict[tuple[str, str], Served] = {}
    # tables on either side of a foreign key have triggers in Postgres (psql's \d looks)
    names = {(t.schema, t.name) for t in tables}
    triggers = {
        end
        for t in tables
        for k in t.foreign_keys
        if (k.ref_schema, k.ref_table) in names
        for end in ((t.schema, t.name), (k.ref_schema, k.ref_table))
    }
    for name in sorted(INFORMATION_SCHEMA_RELATIONS):  # views there, as in Postgres
        view_oid = stable_oid("view", "information_schema", name)
        _add(classes, **_class_row(view_oid, name, INFORMATION_SCHEMA_OID, "v", 0, False))
    for table in tables:
        ns = namespace_oid(table.schema)
        oid = table.oid
        has_pk = bool(table.primary_key)
        relation = _class_row(oid, table.name, ns, "r", len(table.columns), has_pk)
        relation["relhastriggers"] = (table.schema, table.name) in triggers
        _add(classes, **relation)
        positions: dict[str, int] = {}
        for number, column in enumerate(table.columns, start=1):
            positions[column.name] = number
            not_null = column.not_null or column.name in table.primary_key
            _add(attributes, **_attribute_row(oid, column.name, number, column.pg_type, not_null))
        index_oid = stable_oid("index", table.schema, table.name)
        served[(table.schema, table.name)] = Served(
            oid, ns, positions, table.primary_key, index_oid if has_pk else 0
        )
        if not has_pk:
            continue
        index_name = f"{table.name}_pkey"
        constraint_oid = stable_oid("constraint", table.schema, table.name)
        keys = [positions[c] for c in table.primary_key if c in positions]
        _add(classes, **_class_row(index_oid, index_name, ns, "i", len(keys), False))
        # an index has attributes of its own, one per key column (psqlODBC joins them)
        by_name = {c.name: c for c in table.columns}
        for number, name in enumerate(table.primary_key, start=1):
            if name in by_name:
                pg_type = by_name[name].pg_type
                _add(attributes, **_attribute_row(index_oid, name, number, pg_type, False))
        _add(
            indexes,
            indexrelid=index_oid, indrelid=oid, indnatts=len(keys), indnkeyatts=len(keys),
            indisunique=True, indnullsnotdistinct=False, indisprimary=True, indisexclusion=False,
            indimmediate=True, indisclustered=False, indisvalid=True, indcheckxmin=False,
            indisready=True, indislive=True, indisreplident=False, indkey=keys,
            indcollation=[0] * len(keys), indclass=[0] * len(keys), indoption=[0] * len(keys),
        )  # fmt: skip
        _add(
            constraints,
            oid=constraint_oid, conname=index_name, connamespace=ns, contype="p",
            condeferrable=False, condeferred=False, convalidated=True, conrelid=oid, contypid=0,
            conindid=index_oid, conparentid=0, confrelid=0, confupdtype=" ", confdeltype=" ",
            confmatchtype=" ", conislocal=True, coninhcount=0, connoinherit=True, conkey=keys,
        )  # fmt: skip
        cols = ", ".join(_quote_ident(c) for c in table.primary_key)
        qualified = f"{_quote_ident(table.schema)}.{_quote_ident(table.name)}"
        _add(
            defs,
            oid=index_oid,
            conoid=constraint_oid,
            indexdef=f"CREATE UNIQUE INDEX {_quote_ident(index_name)} ON {qualified} "
            f"USING btree ({cols})",
            condef=f"PRIMARY KEY ({cols})",
        )
    for table in tables:
        for key in table.foreign_keys:
            row = foreign_key_rows(key, served[(table.schema, table.name)], served, _quote_ident)
            if row is None:
                continue
            constraint_oid = stable_oid("constraint", table.schema, table.name, key.name)
            _add(
                constraints,
                oid=constraint_oid, conname=key.name, connamespace=namespace_oid(table.schema),
                contype="f", condeferrable=key.deferrable, condeferred=key.deferred,
                convalidated=True, conrelid=row.conrelid, contypid=0, conindid=row.conindid,
                conparentid=0, confrelid=row.confrelid, confupdtype=key.on_update,
                confdeltype=key.on_delete, confmatchtype=key.match, conislocal=True,
                coninhcount=0, connoinherit=True, conkey=row.conkey, confkey=row.confkey,
            )  # fmt: skip
            _add(defs, oid=None, conoid=constraint_oid, indexdef=None, condef=row.definition)
    _table(conn, "pg_namespace", namespaces, _NAMESPACE)
    _table(conn, "pg_class", classes, _CLASS)
    _table(conn, "pg_attribute", attributes, _ATTRIBUTE)
    _table(conn, "pg_index", indexes, _INDEX)
    _table(conn, "pg_constraint", constraints, _CONSTRAINT)
    _table(conn, "sb_indexdefs", defs, _INDEXDEFS)


def _attribute_row(
    relid: int, name: str, number: int, pg_type: pgtypes.PgType, not_null: bool
) -> dict[str, object]:
    collatable = (pg_type.element or pg_type).oid in (25, 1042, 1043)
    return {
        "attrelid": relid, "attname": name, "atttypid": pg_type.oid, "attstattarget": -1,
        "attlen": pg_type.typlen, "attnum": number, "attndims": 1 if pg_type.is_array else 0,
        "attcacheoff": -1, "atttypmod": pg_type.typmod,
        "attbyval": pg_type.typlen in (1, 2, 4, 8) and not pg_type.is_array,
        "attalign": "d" if pg_type.typlen == 8 else "i",
        "attstorage": "x" if pg_type.typlen < 0 else "p", "attcompression": "",
        "attnotnull": not_null, "atthasdef": False, "atthasmissing": False, "attidentity": "",
        "attgenerated": "", "attisdropped": False, "attislocal": True, "attinhcount": 0,
        "attcollation": 100 if collatable else 0,
    }  # fmt: skip


def _quote_ident(name: str) -> str:
    simple = name.isidentifier() and name == name.lower() and name.isascii()
    simple = simple and name not in catalog_tools.QUOTED_KEYWORDS
    return name if simple else _ident(name)


def _information_schema(database: str) -> str:
    # the session's database (a per-connection variable DbSession sets), else the default
    db = f"COALESCE(getvariable('{DATABASE_VARIABLE}'), {_q(database)})"
    s, i = SCHEMA, INFO_SCHEMA
    user_tables = f"""
        FROM {s}.pg_class c JOIN {s}.pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')"""
    return f"""
CREATE VIEW {i}.schemata AS SELECT {db} AS catalog_name, nspname AS schema_name,
    '{OWNER}' AS schema_owner, NULL::VARCHAR AS default_character_set_catalog,
    NULL::VARCHAR AS default_character_set_schema, NULL::VARCHAR AS default_character_set_name,
    NULL::VARCHAR AS sql_path FROM {s}.pg_namespace;
CREATE VIEW {i}.tables AS SELECT {db} AS table_catalog, n.nspname AS table_schema,
    c.relname AS table_name, 'BASE TABLE' AS table_type,
    NULL::VARCHAR AS self_referencing_column_name, NULL::VARCHAR AS reference_generation,
    NULL::VARCHAR AS user_defined_type_catalog, NULL::VARCHAR AS user_defined_type_schema,
    NULL::VARCHAR AS user_defined_type_name, 'NO' AS is_insertable_into, 'NO' AS is_typed,
    NULL::VARCHAR AS commit_action {user_tables};
CREATE VIEW {i}.views AS SELECT {db} AS table_catalog, NULL::VARCHAR AS table_schema,
    NULL::VARCHAR AS table_name, NULL::VARCHAR AS view_definition WHERE false;
CREATE VIEW {i}.columns AS SELECT {db} AS table_catalog, n.nspname AS table_schema,
    c.relname AS table_name, a.attname AS column_name, a.attnum::INTEGER AS ordinal_position,
    NULL::VARCHAR AS column_default, CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END
    AS is_nullable,
    CASE WHEN t.typelem <> 0 AND a.atttypid NOT IN (22, 30) THEN 'ARRAY'
         ELSE regexp_replace(t.sqlname, '\\(.*\\)', '') END
    AS data_type,
    CASE WHEN a.atttypid IN (1042, 1043) AND a.atttypmod >= 4 THEN a.atttypmod - 4
         WHEN a.atttypid IN (1560, 1562) AND a.atttypmod >= 0 THEN a.atttypmod
    END::INTEGER AS character_maximum_length,
    CASE WHEN a.atttypid IN (1042, 1043) AND a.atttypmod >= 4 THEN (a.atttypmod - 4) * 4
         WHEN a.atttypid IN (25, 1042, 1043) THEN 1073741824
    END::INTEGER AS character_octet_length,
    CASE WHEN a.atttypid = 1700 AND a.atttypmod >= 4 THEN (a.atttypmod - 4) >> 16
         WHEN a.atttypid = 21 THEN 16 WHEN a.atttypid = 23 THEN 32 WHEN a.atttypid = 20 THEN 64
         WHEN a.atttypid = 700 THEN 24 WHEN a.atttypid = 701 THEN 53 END::INTEGER
    AS numeric_precision,
    CASE WHEN a.atttypid = 1700 THEN 10 WHEN a.atttypid IN (21, 23, 20, 700, 701) THEN 2
    END::INTEGER AS numeric_precision_radix,
    CASE WHEN a.atttypid = 1700 AND a.atttypmod >= 4 THEN (a.atttypmod - 4) & 65535
         WHEN a.atttypid IN (21, 23, 20) THEN 0 END::INTEGER AS numeric_scale,
    CASE WHEN a.atttypid IN (1083, 1114, 1184, 1266) AND a.atttypmod >= 0 THEN a.atttypmod
         WHEN a.atttypid IN (1083, 1114, 1184, 1186, 1266) THEN 6
         WHEN a.atttypid = 1082 THEN 0 END::INTEGER AS datetime_precision,
    NULL::VARCHAR AS interval_type, NULL::INTEGER AS interval_precision,
    NULL::VARCHAR AS character_set_catalog, NULL::VARCHAR AS character_set_schema,
    NULL::VARCHAR AS character_set_name, NULL::VARCHAR AS collation_catalog,
    NULL::VARCHAR AS collation_schema, NULL::VARCHAR AS collation_name,
    NULL::VARCHAR AS domain_catalog, NULL::VARCHAR AS domain_schema,
    NULL::VARCHAR AS domain_name,
    {db} AS udt_catalog, 'pg_catalog' AS udt_schema, t.typname AS udt_name,
    NULL::VARCHAR AS scope_catalog, NULL::VARCHAR AS scope_schema,
    NULL::VARCHAR AS scope_name, NULL::INTEGER AS maximum_cardinality,
    CAST(a.attnum AS VARCHAR) AS dtd_identifier, 'NO' AS is_self_referencing,
    'NO' AS is_identity, NULL::VARCHAR AS identity_generation,
    NULL::VARCHAR AS identity_start, NULL::VARCHAR AS identity_increment,
    NULL::VARCHAR AS identity_maximum, NULL::VARCHAR AS identity_minimum,
    'NO' AS identity_cycle, 'NEVER' AS is_generated,
    NULL::VARCHAR AS generation_expression, 'NO' AS is_updatable
    FROM {s}.pg_attribute a JOIN {s}.pg_class c ON c.oid = a.attrelid
    JOIN {s}.pg_namespace n ON n.oid = c.relnamespace
    JOIN {s}.sb_types t ON t.oid = a.atttypid
    WHERE c.relkind = 'r' AND a.attnum > 0;
CREATE VIEW {i}.table_constraints AS SELECT {db} AS constraint_catalog,
    n.nspname AS constraint_schema, k.conname AS constraint_name, {db} AS table_catalog,
    n.nspname AS table_schema, c.relname AS table_name,
    CASE k.contype WHEN 'p' THEN 'PRIMARY KEY' WHEN 'f' THEN 'FOREIGN KEY' WHEN 'u' THEN 'UNIQUE'
        ELSE 'CHECK' END AS constraint_type,
    CASE WHEN k.condeferrable THEN 'YES' ELSE 'NO' END AS is_deferrable,
    CASE WHEN k.condeferred THEN 'YES' ELSE 'NO' END AS initially_deferred, 'YES' AS enforced
    FROM {s}.pg_constraint k JOIN {s}.pg_class c ON c.oid = k.conrelid
    JOIN {s}.pg_namespace n ON n.oid = c.relnamespace;
CREATE VIEW {i}.key_column_usage AS SELECT {db} AS constraint_catalog,
    n.nspname AS constraint_schema, k.conname AS constraint_name, {db} AS table_catalog,
    n.nspname AS table_schema, c.relname AS table_name, a.attname AS column_name,
    u.pos::INTEGER AS ordinal_position,
    CASE WHEN k.contype = 'f' THEN COALESCE(list_position(
        (SELECT p.conkey FROM {s}.pg_constraint p WHERE p.conrelid = k.confrelid
            AND p.contype = 'p'), k.confkey[u.pos]), u.pos) END::INTEGER
    AS position_in_unique_constraint
    FROM {s}.pg_constraint k JOIN {s}.pg_class c ON c.oid = k.conrelid
    JOIN {s}.pg_namespace n ON n.oid = c.relnamespace,
    LATERAL (SELECT unnest(k.conkey) AS attnum, generate_subscripts(k.conkey, 1) AS pos) u
    JOIN {s}.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum;
CREATE VIEW {i}.referential_constraints AS SELECT {db} AS constraint_catalog,
    n.nspname AS constraint_schema, k.conname AS constraint_name,
    {db} AS unique_constraint_catalog, pn.nspname AS unique_constraint_schema,
    p.conname AS unique_constraint_name,
    CASE k.confmatchtype WHEN 'f' THEN 'FULL' WHEN 'p' THEN 'PARTIAL' ELSE 'NONE' END
    AS match_option,
    {_RULE.format(column="k.confupdtype")} AS update_rule,
    {_RULE.format(column="k.confdeltype")} AS delete_rule
    FROM {s}.pg_constraint k JOIN {s}.pg_namespace n ON n.oid = k.connamespace
    LEFT JOIN {s}.pg_constraint p ON p.conrelid = k.confrelid AND p.contype = 'p'
    LEFT JOIN {s}.pg_namespace pn ON pn.oid = p.connamespace
    WHERE k.contype = 'f';
"""


_RULE = """CASE {column} WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL'
    WHEN 'd' THEN 'SET DEFAULT' WHEN 'r' THEN 'RESTRICT' ELSE 'NO ACTION' END"""


def catalog_tables_sql() -> list[str]:
    """Names of the relations a refresh rebuilds (for tests and diagnostics)."""
    return [f"{SCHEMA}.{name}" for name in _DYNAMIC]
