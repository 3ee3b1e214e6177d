"""The lake side of `streambed verify`: which Iceberg snapshot holds a table at an LSN, and
the table read at it with DuckDB, its values rendered as Postgres text by the query
server's own encoder (`streambed.server.pgtypes.encode_text_column`), so each value's text
is the one a client of the query port reads and equals the source's."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from streambed.core.config import Settings
from streambed.lake.commit import SUMMARY_LSN
from streambed.lake.tables import PROP_KEY
from streambed.server.extensions import load_extensions
from streambed.server.pgtypes import encode_text_column, pg_type_for_arrow
from streambed.storage.s3 import S3Access
from streambed.verify import hashing
from streambed.verify.hashing import Bucket, Row, Summary

BATCH_ROWS = 65_536
SCAN = "iceberg_scan(?, snapshot_from_id := ?)"  # parameters: metadata location, snapshot


@dataclass(frozen=True)
class LakeTable:
    metadata_location: str
    snapshot_id: int | None  # None: no snapshot at or before the LSN (no rows)
    lsn: int  # the snapshot's `streambed.lsn`: it holds the source at this LSN
    columns: tuple[str, ...]
    key: tuple[str, ...]


def choose(table: Any, target: int) -> tuple[int | None, int]:
    """(snapshot id, its LSN) that holds a pyiceberg table at `target` exactly, or at the
    lowest LSN above it: the newest snapshot whose `streambed.lsn` is <= target when no
    snapshot has a higher one (the table had no change since: it holds the table at
    target), else the newest of those with the lowest LSN above target (the flush that may
    hold changes committed up to target together with later ones). (None, target) when the
    table has no snapshot at all."""
    at: list[tuple[int, int, int]] = []
    above: list[tuple[int, int, int]] = []
    for snapshot in table.metadata.snapshots:
        raw = snapshot.summary.get(SUMMARY_LSN) if snapshot.summary is not None else None
        if raw is None:
            continue
        entry = (int(raw), snapshot.timestamp_ms, snapshot.snapshot_id)
        (above if entry[0] > target else at).append(entry)
    if above:
        lowest = min(e[0] for e in above)
        best = max(e for e in above if e[0] == lowest)
        return best[2], best[0]
    if at:
        best = max(at)
        return best[2], target
    return None, target


def lake_table(table: Any, target: int) -> LakeTable:
    snapshot_id, lsn = choose(table, target)
    schema = table.schema()
    if snapshot_id is not None:
        schema_id = table.snapshot_by_id(snapshot_id).schema_id
        schema = table.schemas().get(schema_id, schema) if schema_id is not None else schema
    columns = tuple(f.name for f in schema.fields)
    key = tuple(json.loads(table.properties.get(PROP_KEY, "[]")))
    return LakeTable(table.metadata_location, snapshot_id, lsn, columns, key)


def connect(settings: Settings) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    load_extensions(conn)
    conn.execute("SET TimeZone = 'UTC'")
    if settings.on_s3:
        conn.execute(S3Access.from_settings(settings).duckdb_secret("streambed_verify_s3"))
    return conn


def _batches(conn: duckdb.DuckDBPyConnection, table: LakeTable) -> Iterator[pa.RecordBatch]:
    if table.snapshot_id is None or not table.columns:
        return
    listed = ", ".join(_quoted(c) for c in table.columns)
    reader = conn.execute(
        f"SELECT {listed} FROM {SCAN}",
        [table.metadata_location, table.snapshot_id],
    ).fetch_record_batch(BATCH_ROWS)
    yield from reader


def _rows(
    conn: duckdb.DuckDBPyConnection, table: LakeTable
) -> Iterator[tuple[str, tuple[bytes | None, ...], tuple[bytes | None, ...]]]:
    """(key digest, key text, row text) of every row."""
    index = [table.columns.index(k) for k in table.key]
    for batch in _batches(conn, table):
        columns = [
            encode_text_column(batch.column(i), pg_type_for_arrow(batch.column(i).type))
            for i in range(batch.num_columns)
        ]
        for values in zip(*columns, strict=True):
            key = tuple(values[i] for i in index) if index else values
            yield hashing.key_digest(hashing.row_form(key)), key, values


NATIVE_TEXT = {  # DuckDB types whose text DuckDB writes as Postgres does: SQL for it
    "SMALLINT": "CAST({c} AS VARCHAR)",
    "INTEGER": "CAST({c} AS VARCHAR)",
    "BIGINT": "CAST({c} AS VARCHAR)",
    "VARCHAR": "{c}",
    "BOOLEAN": "(CASE WHEN {c} THEN 't' WHEN NOT {c} THEN 'f' END)",
}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def native_texts(conn: duckdb.DuckDBPyConnection, table: LakeTable) -> list[str] | None:
    """DuckDB SQL writing each column's Postgres text, when every column has a type DuckDB
    writes as Postgres does (`NATIVE_TEXT`: integers, text, booleans); else None."""
    if table.snapshot_id is None or not table.columns:
        return None
    listed = ", ".join(_quoted(c) for c in table.columns)
    described = conn.execute(
        f"DESCRIBE SELECT {listed} FROM {SCAN}",
        [table.metadata_location, table.snapshot_id],
    ).fetchall()
    types = [str(row[1]) for row in described]
    if len(types) != len(table.columns) or any(t not in NATIVE_TEXT for t in types):
        return None
    return [NATIVE_TEXT[t].format(c=_quoted(c)) for t, c in zip(types, table.columns, strict=True)]


def _summary_query(table: LakeTable, parent: Bucket, modulus: int, source: str) -> str:
    """Rows and hash sum per bucket of `source`, whose columns c0, c1, ... hold the text."""
    offset, _ = hashing.child_step(parent, modulus)
    names = [f"c{i}" for i in range(len(table.columns))]
    key = [names[table.columns.index(k)] for k in table.key] if table.key else names
    return (
        f"SELECT {hashing.duck_step('d', offset, modulus)} AS b, count(*) AS n, "
        f"sum({hashing.DUCK_ROW_HASH.format(digest='r')}) AS s FROM (SELECT "
        f"md5({hashing.duck_row_form(key)}) AS d, md5({hashing.duck_row_form(names)}) AS r "
        f"FROM {source}) WHERE {hashing.duck_bucket('d', parent)} GROUP BY b"
    )


def summary(
    conn: duckdb.DuckDBPyConnection, table: LakeTable, parent: Bucket, modulus: int
) -> Summary:
    """Rows and hash sum per bucket. A table of types DuckDB writes as Postgres does
    (`native_texts`) is read, rendered and hashed in one DuckDB query, in parallel;
    otherwise each batch is rendered as Postgres text in Python (the query server's
    encoder), then hashed and summed by DuckDB, vectorized."""
    texts = native_texts(conn, table)
    if texts is not None:
        rendered = ", ".join(f"{t} AS c{i}" for i, t in enumerate(texts))
        query = _summary_query(table, parent, modulus, f"(SELECT {rendered} FROM {SCAN})")
        found = conn.execute(query, [table.metadata_location, table.snapshot_id]).fetchall()
        return {int(b): (int(n), int(s)) for b, n, s in found}
    names = [f"c{i}" for i in range(len(table.columns))]
    query = _summary_query(table, parent, modulus, "verify_batch")
    sums: dict[int, list[int]] = {}
    hasher = duckdb.connect()
    try:
        for batch in _batches(conn, table):
            texts_table = pa.table(
                [
                    pa.array(
                        encode_text_column(column, pg_type_for_arrow(column.type)), pa.string()
                    )
                    for column in batch.columns
                ],
                names=names,
            )
            hasher.register("verify_batch", texts_table)
            for b, n, s in hasher.execute(query).fetchall():
                entry = sums.setdefault(int(b), [0, 0])
                entry[0] += int(n)
                entry[1] += int(s)
            hasher.unregister("verify_batch")
    finally:
        hasher.close()
    return {b: (n, s) for b, (n, s) in sums.items()}


def rows(conn: duckdb.DuckDBPyConnection, table: LakeTable, buckets: Sequence[Bucket]) -> list[Row]:
    out: list[Row] = []
    if not buckets:
        return out
    wanted = hashing.BucketSet(buckets)
    for digest, key, values in _rows(conn, table):
        if digest in wanted:
            out.append(Row(_text(key), _text(values), hashing.row_hash(hashing.row_form(values))))
    return out


def _text(values: Sequence[bytes | None]) -> tuple[str | None, ...]:
    return tuple(None if v is None else v.decode() for v in values)
