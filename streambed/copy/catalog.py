"""What the copy needs to know about a source table, read from the catalog.

`table_info` builds the same `Relation` a pgoutput Relation message would carry for the table
(columns that are neither dropped nor generated, their type OIDs and modifiers, the replica
identity flags), so the lake table the copy creates is the one the stream expects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from streambed.buffer.changes import TableKey, lake_key
from streambed.core.errors import Kind, SourceError
from streambed.lake.declared import SourceFacts, read_facts
from streambed.pgoutput.messages import KEY_FLAG, Relation, RelationColumn
from streambed.source import setup


@dataclass(frozen=True)
class TableInfo:
    relation: Relation
    key: TableKey
    blocks: int  # heap blocks now (at least pg_class.relpages)
    estimated_rows: int  # pg_class.reltuples; 0 when never analyzed
    attnums: tuple[tuple[str, int], ...] = ()  # (column name, pg attnum) at the snapshot
    toast_bytes: int = 0  # its TOAST table's size: values stored out of line
    # Each column's type output function, (schema, name): the copy reads a column DuckDB
    # does not decode as that function's text (`streambed.copy.duck.select_query`).
    outputs: tuple[tuple[str, str], ...] = ()
    # A partitioned table (relkind 'p') is read with its partitions, which hold its rows;
    # any other only as itself (`FROM ONLY`): its inheritance children, if any, are
    # published, streamed and copied as tables of their own.
    partitioned: bool = False
    # The publication's row filter for the table (`pg_publication_tables.rowfilter`, SQL
    # over its columns), which the copy applies as the stream does; None: every row.
    row_filter: str | None = None
    # The source's declared types, NOT NULL and foreign keys (`streambed.lake.declared`).
    facts: SourceFacts = field(default_factory=SourceFacts)

    @property
    def stored_bytes(self) -> int:
        """The table's heap and TOAST as stored now (8 kB blocks)."""
        return self.blocks * 8192 + self.toast_bytes

    def row_bytes(self) -> float:
        """Estimated bytes of a row with its out-of-line values (stored size: TOAST may be
        compressed); 0 when unknown (never analyzed and nothing out of line)."""
        if self.estimated_rows > 0:
            return self.stored_bytes / self.estimated_rows
        return float(self.toast_bytes and 1024 * 1024)  # unknown rows, large values: assume big

    @property
    def schema(self) -> str:
        return self.relation.namespace

    @property
    def name(self) -> str:
        return self.relation.name

    @property
    def qualified(self) -> str:
        return f"{self.relation.namespace}.{self.relation.name}"


class TableGone(SourceError):
    """The table no longer exists in the source."""


HEAP_BYTES = """greatest(pg_relation_size(c.oid),
                 (SELECT coalesce(sum(pg_relation_size(t.relid)), 0)
                  FROM pg_partition_tree(c.oid) t WHERE t.isleaf))"""
"""SQL: the heap bytes of the table `c` (a `pg_class` row). A partitioned table has no storage
of its own: its partitions' are counted (pg_partition_tree is empty for a table outside any
partition tree)."""
TOAST_BYTES = """greatest(coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0),
                  (SELECT coalesce(sum(pg_relation_size(nullif(p.reltoastrelid, 0))), 0)
                   FROM pg_partition_tree(c.oid) t JOIN pg_class p ON p.oid = t.relid
                   WHERE t.isleaf))"""
"""SQL: the bytes of `c`'s TOAST table, a partitioned table's summed over its partitions."""


def row_security_message(qualified: str, role: str = "<role>") -> str:
    """Why a table whose row-level security applies to the role is not copied, and what to
    do (`streambed.source.copy_session` turns row security off in the copy's sessions)."""
    return (
        f"cannot copy {qualified}: row-level security is on for it and applies to the role "
        f"{role}, so a copy would hold only the rows its policies let {role} see, while the "
        f"stream sends changes to every row. A superuser can exempt the role from row "
        f"security (ALTER ROLE {role} BYPASSRLS), or streambed can connect as the table's "
        "owner, unless the table forces row security; then restart streambed or run "
        f"`streambed resync {qualified}`"
    )


def table_info(
    conn: psycopg.Connection[Any], schema: str, name: str, publication: str | None = None
) -> TableInfo:
    """Columns, key and size of `schema.name`. Raises `TableGone` when it does not exist and
    a SOURCE_SETUP `SourceError` naming the table when the role may not SELECT from it.

    With `publication`, what it publishes of the table: only the columns of its column list
    (pgoutput sends no others) and the rows of its row filter (`TableInfo.row_filter`), as
    Postgres's own initial table synchronization copies them."""
    qualified = f"{schema}.{name}"
    row = conn.execute(
        f"""
        SELECT c.oid, c.relkind, c.relreplident, c.relpages, c.reltuples,
               {HEAP_BYTES} / current_setting('block_size')::int,
               has_table_privilege(c.oid, 'SELECT'),
               {TOAST_BYTES},
               row_security_active(c.oid), current_user
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')
        """,
        (schema, name),
    ).fetchone()
    if row is None:
        raise TableGone(
            f"{qualified} no longer exists in the source; it is left out of the copy",
            kind=Kind.SOURCE_SETUP,
        )
    oid, relkind, replident, relpages, reltuples, blocks, may_select, toast_bytes = row[:8]
    filtered, role = row[8:]
    if not may_select:
        raise SourceError(
            f"cannot copy {qualified}: the role may not SELECT from it. Run GRANT SELECT ON "
            f"{qualified} TO <role>; then restart streambed or run `streambed resync "
            f"{qualified}`",
            kind=Kind.SOURCE_SETUP,
        )
    if filtered:
        raise SourceError(row_security_message(qualified, role), kind=Kind.SOURCE_SETUP)
    keys = setup.table_key(conn, int(oid))
    identity = set(keys.identity_columns)
    columns = conn.execute(
        """
        SELECT a.attname, a.atttypid, a.atttypmod, a.attnum, fn.nspname, f.proname
        FROM pg_attribute a
        JOIN pg_type t ON t.oid = a.atttypid
        JOIN pg_proc f ON f.oid = t.typoutput
        JOIN pg_namespace fn ON fn.oid = f.pronamespace
        WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
        ORDER BY a.attnum
        """,
        (oid,),
    ).fetchall()
    published, row_filter = _published_part(conn, publication, schema, name)
    if published is not None:
        columns = [c for c in columns if c[0] in published]
    replica_identity = str(replident)
    relation = Relation(
        relation_id=int(oid),
        namespace=schema,
        name=name,
        replica_identity=replica_identity,
        columns=tuple(
            RelationColumn(
                KEY_FLAG if replica_identity == "f" or attname in identity else 0,
                str(attname),
                int(typid),
                int(typmod),
            )
            for attname, typid, typmod, *_ in columns
        ),
    )
    return TableInfo(
        relation=relation,
        key=lake_key(relation, lambda: keys.primary_key),
        blocks=max(int(relpages), int(blocks)),
        estimated_rows=max(0, int(reltuples)),
        attnums=tuple((str(attname), int(attnum)) for attname, _, _, attnum, *_ in columns),
        toast_bytes=int(toast_bytes),
        outputs=tuple((str(schema), str(function)) for *_, schema, function in columns),
        partitioned=relkind == "p",
        row_filter=row_filter,
        facts=read_facts(conn, int(oid), [c.name for c in relation.columns]),
    )


def _published_part(
    conn: psycopg.Connection[Any], publication: str | None, schema: str, name: str
) -> tuple[set[str] | None, str | None]:
    """The columns `publication` sends of the table (None: all) and its row filter (None:
    none). Column lists and row filters came with Postgres 15."""
    if publication is None or conn.info.server_version < 150000:
        return None, None
    row = conn.execute(
        "SELECT attnames, rowfilter FROM pg_publication_tables "
        "WHERE pubname = %s AND schemaname = %s AND tablename = %s",
        (publication, schema, name),
    ).fetchone()
    if row is None:  # out of the publication now: `streambed.copy.streamed` sees to it
        return None, None
    attnames, row_filter = row
    return (None if attnames is None else set(attnames)), row_filter
