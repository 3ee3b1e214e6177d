"""The Iceberg side: catalog, type mapping and conversion, tables, Parquet files, commits, storage.

Modules: `catalog` (open_catalog), `types` (Postgres → Iceberg/Arrow types), `convert`
(text-form values → Arrow), `tables` (ensure_table, arrow_schema), `files` (write_parquet,
data_files, FileInfo), `commit` (commit, truncate_commit, frontier), `storage` (creating
and checking the warehouse; storage failures). S3 clients' options and filesystems:
`streambed.storage`.
"""
