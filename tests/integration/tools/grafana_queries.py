"""Catalog SQL of Grafana's PostgreSQL data source (public/app/plugins/datasource/
grafana-postgresql-datasource/postgresMetaQuery.ts, commit 12f912a): the version probe and
the query editor's schema, table and column pickers. `{table}` is the picked table.
"""

VERSION = "SELECT current_setting('server_version_num')::int/100 as version"

TIMESCALE = "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"

SCHEMAS = """SELECT schema_name AS "name"
    FROM information_schema.schemata
    WHERE schema_name NOT IN ('information_schema',
                              'pg_catalog',
                              'pg_toast',
                              '_timescaledb_cache',
                              '_timescaledb_catalog',
                              '_timescaledb_internal',
                              '_timescaledb_config',
                              'timescaledb_information',
                              'timescaledb_experimental')
    ORDER BY schema_name"""

_IN_SEARCH_PATH = """
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""

TABLES = f"""SELECT
    CASE WHEN {_IN_SEARCH_PATH}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN {_IN_SEARCH_PATH} THEN 0 ELSE 1 END, 1"""

TABLES_OF_SCHEMA = """SELECT quote_ident(table_name) AS "table"
      FROM information_schema.tables
      WHERE quote_ident(table_schema) = 'sales'
      ORDER BY 1"""

COLUMNS = f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('{{table}}'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('{{table}}'))[1]
          AND quote_ident(table_name) = (parse_ident('{{table}}'))[2]
        ELSE quote_ident(table_name) = '{{table}}'
          AND {_IN_SEARCH_PATH}
      END"""
