"""The source side of `streambed verify`: a snapshot at a known LSN, and the table read in
it with SQL (hash sums per bucket, rows of chosen buckets).

The snapshot comes from a TEMPORARY logical slot created with an exported snapshot, as the
copy of a table added while streaming does (`SnapshotAnchor.from_temporary_slot`): it holds
exactly the transactions whose commit record lies before the slot's consistent point, so
the lake state to compare it with is the one at frontier `seam - 1`. The slot is dropped at
once; readers import the anchor's snapshot on connections with the replication session's
output settings (`copy_connect`), so every value's text is what the stream sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from streambed.core.errors import Kind, SourceError
from streambed.source.copy_session import copy_connect
from streambed.source.snapshot import SnapshotAnchor
from streambed.verify import hashing
from streambed.verify.hashing import Bucket, Row, Summary

DIGEST = "streambed_verify_digest"  # the key digest's column in the queries below
HASH = "streambed_verify_hash"


@dataclass(frozen=True)
class SourceTable:
    schema: str
    name: str
    columns: tuple[str, ...]  # in the lake's order
    key: tuple[str, ...]  # empty: compared as a multiset
    partitioned: bool

    @property
    def from_sql(self) -> str:
        ident = sql.Identifier(self.schema, self.name).as_string(None)
        return ident if self.partitioned else f"ONLY {ident}"

    def quoted(self, names: Sequence[str]) -> list[str]:
        return [sql.Identifier(n).as_string(None) for n in names]

    @property
    def row_form(self) -> str:
        return hashing.sql_row_form(self.quoted(self.columns))

    @property
    def key_form(self) -> str:
        return hashing.sql_row_form(self.quoted(self.key or self.columns))


class SourceReader:
    """A connection reading in the anchor's snapshot."""

    def __init__(self, url: str, anchor: SnapshotAnchor) -> None:
        self.conn = copy_connect(url, "streambed-verify")
        try:
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            self.conn.execute(
                sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(anchor.snapshot_name))
            )
        except psycopg.Error as e:
            self.conn.close()
            raise _error("importing the verify snapshot", e) from e

    def close(self) -> None:
        self.conn.close()

    def _query(self, text: str, action: str) -> list[tuple[Any, ...]]:
        try:
            return list(self.conn.execute(text).fetchall())
        except psycopg.Error as e:
            raise _error(action, e) from e

    def columns(self, schema: str, name: str) -> tuple[list[str], list[str], bool] | None:
        """(columns, generated columns, partitioned) of a source table; None if missing."""
        rows = self._query(
            sql.SQL(
                "SELECT a.attname, a.attgenerated <> '', c.relkind = 'p' FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON "
                "a.attrelid = c.oid WHERE n.nspname = {} AND c.relname = {} AND a.attnum > 0 "
                "AND NOT a.attisdropped ORDER BY a.attnum"
            )
            .format(sql.Literal(schema), sql.Literal(name))
            .as_string(self.conn),
            f"reading the columns of {schema}.{name}",
        )
        if not rows:
            return None
        plain = [str(r[0]) for r in rows if not r[1]]
        generated = [str(r[0]) for r in rows if r[1]]
        return plain, generated, bool(rows[0][2])

    def estimate(self, table: SourceTable) -> int:
        rows = self._query(
            sql.SQL("SELECT reltuples::bigint FROM pg_class WHERE oid = {}::regclass")
            .format(sql.Literal(sql.Identifier(table.schema, table.name).as_string(None)))
            .as_string(self.conn),
            "estimating the table's size",
        )
        return max(0, int(rows[0][0])) if rows else 0

    def _from(self, table: SourceTable, exclude: Sequence[str] | None) -> str:
        """The table's rows with their key digest, hash and text, leaving out the
        keys whose digests are in `exclude` (None: every row)."""
        texts = [hashing.sql_text(c) for c in table.quoted(table.columns)]
        hashed = hashing.SQL_ROW_HASH.format(form=table.row_form)
        # Not a fence (OFFSET 0) against Postgres folding this into the queries around it,
        # which computes the digest again for a second reference: that would also keep
        # Postgres from reading the table with parallel workers, which pays more.
        rows = (
            f"SELECT md5({table.key_form}) AS {DIGEST}, {hashed} AS {HASH}, "
            f"{', '.join(texts) or 'NULL'} FROM {table.from_sql} t"
        )
        if not exclude:
            return f"({rows}) r"
        listed = "'{" + ",".join(exclude) + "}'::text[]"  # hex digests: nothing to quote
        return (
            f"({rows}) r WHERE NOT EXISTS (SELECT FROM unnest({listed}) x(d) "
            f"WHERE x.d = r.{DIGEST})"
        )

    def summary(
        self, table: SourceTable, parent: Bucket, modulus: int, exclude: Sequence[str] | None
    ) -> Summary:
        offset, _ = hashing.child_step(parent, modulus)
        text = (
            f"SELECT {hashing.sql_step(DIGEST, offset, modulus)} AS b, count(*), "
            f"sum({HASH})::text FROM (SELECT * FROM {self._from(table, exclude)}) s "
            f"WHERE {hashing.sql_bucket(DIGEST, parent)} GROUP BY 1"
        )
        rows = self._query(text, f"hashing {table.schema}.{table.name}")
        return {int(b): (int(n), int(s)) for b, n, s in rows}

    def rows(
        self, table: SourceTable, buckets: Sequence[Bucket], exclude: Sequence[str] | None
    ) -> list[Row]:
        if not buckets:
            return []
        return self._rows(table, f"({hashing.BucketSet(buckets).sql(DIGEST)})", exclude)

    def by_digest(self, table: SourceTable, digests: Sequence[str]) -> list[Row]:
        """The rows whose key digests are `digests`."""
        if not digests:
            return []
        listed = "'{" + ",".join(digests) + "}'::text[]"
        return self._rows(table, f"{DIGEST} = ANY({listed})", None)

    def _rows(self, table: SourceTable, condition: str, exclude: Sequence[str] | None) -> list[Row]:
        text = f"SELECT * FROM (SELECT * FROM {self._from(table, exclude)}) s WHERE {condition}"
        index = [table.columns.index(k) for k in table.key] if table.key else None
        out = []
        for row in self._query(text, f"reading rows of {table.schema}.{table.name}"):
            values = tuple(row[2:]) if table.columns else ()
            key = values if index is None else tuple(values[i] for i in index)
            out.append(Row(key, values, int(row[1])))
        return out


def _error(action: str, e: psycopg.Error) -> SourceError:
    detail = " ".join(str(e).split())
    return SourceError(f"{action} failed in the source: {detail}", kind=Kind.SOURCE_SETUP)
