# ruff: noqa: E501
"""The catalog SQL Npgsql sends when it opens a connection (type loading), as
src/Npgsql/PostgresDatabaseInfo.cs of Npgsql 11.0.0-preview.1 (commit 3cb5804, 2026-08-18)
builds it for Postgres 15 with the default type-loading options (ranges and multiranges
on, no table composites, no schema list). Npgsql sends the four as one batch; Power BI's
Postgres connector connects through Npgsql.
"""

VERSION = "SELECT version();"

LOAD_TYPES = """
SELECT ns.nspname, t.oid, t.typname, t.typtype, t.typnotnull, t.elemtypoid
FROM (
    SELECT
        typ.oid, typ.typnamespace, typ.typname, typ.typtype, typ.typrelid, typ.typnotnull, typ.relkind,
        elemtyp.oid AS elemtypoid, elemtyp.typname AS elemtypname, elemcls.relkind AS elemrelkind,
        CASE WHEN elemproc.proname='array_recv' THEN 'a' ELSE elemtyp.typtype END AS elemtyptype
        , typ.typcategory
    FROM (
        SELECT typ.oid, typnamespace, typname, typrelid, typnotnull, relkind, typelem AS elemoid,
            CASE WHEN proc.proname='array_recv' THEN 'a' ELSE typ.typtype END AS typtype,
            CASE
                WHEN proc.proname='array_recv' THEN typ.typelem
                WHEN typ.typtype='r' THEN rngsubtype
                WHEN typ.typtype='m' THEN (SELECT rngtypid FROM pg_range WHERE rngmultitypid = typ.oid)
                WHEN typ.typtype='d' THEN typ.typbasetype
            END AS elemtypoid
            , typ.typcategory
        FROM pg_type AS typ
        LEFT JOIN pg_class AS cls ON (cls.oid = typ.typrelid)
        LEFT JOIN pg_proc AS proc ON proc.oid = typ.typreceive
        LEFT JOIN pg_range ON (pg_range.rngtypid = typ.oid)
    ) AS typ
    LEFT JOIN pg_type AS elemtyp ON elemtyp.oid = elemtypoid
    LEFT JOIN pg_class AS elemcls ON (elemcls.oid = elemtyp.typrelid)
    LEFT JOIN pg_proc AS elemproc ON elemproc.oid = elemtyp.typreceive
) AS t
JOIN pg_namespace AS ns ON (ns.oid = typnamespace)
WHERE
    (typtype IN ('b', 'r', 'm', 'e', 'd') OR
    (typtype = 'c' AND relkind='c') OR
    (typtype = 'p' AND typname IN ('record', 'void', 'unknown')) OR
    (typtype = 'a' AND (
        elemtyptype IN ('b', 'r', 'm', 'e', 'd') OR
        (elemtyptype = 'p' AND elemtypname IN ('record', 'void')) OR
        (elemtyptype = 'c' AND elemrelkind='c')
    )))
ORDER BY CASE
       WHEN typtype IN ('b', 'e', 'p') THEN 0
       WHEN typtype = 'c' THEN 1
       WHEN typtype = 'r' THEN 2
       WHEN typtype = 'm' THEN 3
       WHEN typtype = 'd' AND elemtyptype <> 'a' THEN 4
       WHEN typtype = 'a' THEN 5
       WHEN typtype = 'd' AND elemtyptype = 'a' THEN 6
END;"""

LOAD_COMPOSITES = """
SELECT typ.oid, att.attname, att.atttypid
FROM pg_type AS typ
JOIN pg_namespace AS ns ON (ns.oid = typ.typnamespace)
JOIN pg_class AS cls ON (cls.oid = typ.typrelid)
JOIN pg_attribute AS att ON (att.attrelid = typ.typrelid)
WHERE
  (typ.typtype = 'c' AND cls.relkind='c') AND
  attnum > 0 AND
  NOT attisdropped
ORDER BY typ.oid, att.attnum;"""

LOAD_ENUMS = """
SELECT typ.oid, enumlabel
FROM pg_enum
JOIN pg_type AS typ ON typ.oid = enumtypid
JOIN pg_namespace AS ns ON ns.oid = typ.typnamespace

ORDER BY oid, enumsortorder;"""

CONNECT = [VERSION, LOAD_TYPES, LOAD_COMPOSITES, LOAD_ENUMS]

# NpgsqlConnection.GetSchema(...) collections (src/Npgsql/NpgsqlSchema.cs), which ADO.NET
# tools browse with; restrictions become `WHERE column = $n` (Npgsql's BuildCommand).
SCHEMATA = """SELECT * FROM (
    SELECT current_database(), nspname, r.rolname
    FROM pg_catalog.pg_namespace
    LEFT JOIN pg_catalog.pg_roles r ON r.oid = nspowner
) tmp"""

TABLES = """SELECT table_catalog, table_schema, table_name, table_type
FROM information_schema.tables
WHERE
    table_type IN ('BASE TABLE', 'FOREIGN', 'FOREIGN TABLE') AND
    table_schema NOT IN ('pg_catalog', 'information_schema')
"""

COLUMNS = """SELECT
    table_catalog,
    table_schema,
    table_name,
    column_name,
    ordinal_position,
    column_default,
    is_nullable,
    CASE WHEN udt_schema is NULL THEN udt_name ELSE format_type(typ.oid, NULL) END,
    character_maximum_length,
    character_octet_length,
    numeric_precision,
    numeric_precision_radix,
    numeric_scale,
    datetime_precision,
    character_set_catalog,
    character_set_schema,
    character_set_name,
    collation_catalog
FROM information_schema.columns
JOIN pg_namespace AS ns ON ns.nspname = udt_schema
JOIN pg_type AS typ ON typnamespace = ns.oid AND typname = udt_name
 WHERE table_schema = $1"""

PRIMARY_KEYS = """SELECT
    current_database(),
    pgn.nspname,
    pgc.conname,
    current_database(),
    pgtn.nspname,
    pgt.relname,
    constraint_type,
    pgc.condeferrable,
    pgc.condeferred
FROM
    pg_catalog.pg_constraint pgc
    JOIN pg_catalog.pg_namespace pgn ON pgc.connamespace = pgn.oid
    JOIN pg_catalog.pg_class pgt ON pgc.conrelid = pgt.oid
    JOIN pg_catalog.pg_namespace pgtn ON pgt.relnamespace = pgtn.oid
    JOIN (
        SELECT 'PRIMARY KEY' AS constraint_type, 'p' AS contype
        UNION ALL
        SELECT 'FOREIGN KEY' AS constraint_type, 'f' AS contype
        UNION ALL
        SELECT 'UNIQUE KEY' AS constraint_type, 'u' AS contype
) mapping_table ON mapping_table.contype = pgc.contype
 and pgc.contype='p'"""

CONSTRAINT_COLUMNS = """SELECT current_database(),
    n.nspname,
    c.conname,
    current_database(),
    n.nspname,
    t.relname,
    a.attname,
    a.attnum,
    mapping_table.constraint_type
FROM pg_constraint c
    JOIN pg_namespace n on n.oid = c.connamespace
    JOIN pg_class t on t.oid = c.conrelid AND t.relkind = 'r'
    JOIN pg_attribute a on t.oid = a.attrelid AND a.attnum = ANY(c.conkey)
    JOIN (
        SELECT 'PRIMARY KEY' AS constraint_type, 'p' AS contype
        UNION ALL
        SELECT 'FOREIGN KEY' AS constraint_type, 'f' AS contype
        UNION ALL
        SELECT 'UNIQUE KEY' AS constraint_type, 'u' AS contype
) mapping_table ON
    mapping_table.contype = c.contype"""
