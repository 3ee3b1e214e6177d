"""Lookups of pgjdbc 42.5 (org/postgresql/jdbc/PgDatabaseMetaData.java) that read
pg_settings: getImportedKeys / getIndexInfo size their key positions by max_index_keys."""

MAX_INDEX_KEYS = "SELECT setting FROM pg_catalog.pg_settings WHERE name='max_index_keys'"
SERVER_VERSION_NUM = "SELECT setting FROM pg_catalog.pg_settings WHERE name='server_version_num'"
