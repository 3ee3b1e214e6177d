"""Source setup and the catalog queries the pipeline needs.

`check_source` verifies wal_level and the role's right to replicate; `ensure_publication` and
`ensure_slot` create what is missing and report whether they did. Nothing here drops a
publication, nor a slot, except streambed's own slot once the source has invalidated it
(`wal_status = 'lost'`): the changes it held are gone, and it can never stream again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from streambed.core.errors import Kind, SourceError
from streambed.core.lsn import parse_lsn
from streambed.core.names import table_selected
from streambed.source.connection import (
    CreatedSlot,
    ReplicationConnection,
    check_name,
    source_error,
)

logger = logging.getLogger(__name__)

SQLConnection = psycopg.Connection[Any]


@dataclass(frozen=True)
class PublicationResult:
    name: str
    created: bool
    publish_via_partition_root: bool
    all_tables: bool
    unpublished: tuple[str, ...] = ()  # operations it does not publish: "deletes", ...


@dataclass(frozen=True)
class SlotResult:
    name: str
    created: bool
    # Set only when the slot was created now. With export_snapshot, the snapshot stays valid
    # until the replication connection that created it runs its next command or closes.
    consistent_point: int | None = None
    snapshot_name: str | None = None


@dataclass(frozen=True)
class SlotPosition:
    confirmed_flush_lsn: int | None
    restart_lsn: int | None
    active: bool
    active_pid: int | None


@dataclass(frozen=True)
class SlotHealth:
    """What the source says of a slot (`streambed status`). Byte counts are from the
    source's current WAL position; `safe_wal_size` is None when `max_slot_wal_keep_size`
    is unlimited."""

    active: bool
    wal_status: str | None  # reserved, extended, unreserved, lost
    unacknowledged: int | None  # bytes of WAL after the confirmed position
    retained: int | None  # bytes of WAL the slot keeps the source from removing
    safe_wal_size: int | None  # bytes more before the source may invalidate it


@dataclass(frozen=True)
class PublishedTable:
    schema: str
    name: str
    relation_id: int

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class SourceKey:
    primary_key: tuple[str, ...]  # in index order; () when the table has none
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    identity_columns: tuple[str, ...]  # the columns Delete/Update old tuples carry as key


def _run(
    conn: SQLConnection, query: sql.Composed | str, params: Sequence[Any] = (), *, action: str
) -> list[tuple[Any, ...]]:
    try:
        if isinstance(query, str):
            cur = conn.execute(query.encode(), params)
        else:
            cur = conn.execute(query, params)
        return cur.fetchall() if cur.description is not None else []
    except psycopg.OperationalError as e:
        raise source_error(_url(conn), action, str(e), Kind.SOURCE_UNREACHABLE) from e
    except psycopg.errors.InsufficientPrivilege as e:
        raise source_error(_url(conn), action, str(e), Kind.SOURCE_SETUP) from e
    except psycopg.Error as e:
        raise source_error(_url(conn), action, str(e)) from e


def _url(conn: SQLConnection) -> str:
    info = conn.info
    return f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}"


# ---- checks --------------------------------------------------------------------------


def check_source(conn: SQLConnection) -> None:
    """wal_level must be logical and the role must be allowed to replicate."""
    (wal_level,) = _run(conn, "SHOW wal_level", action="reading wal_level")[0]
    if wal_level != "logical":
        raise SourceError(
            f"the source has wal_level = {wal_level}; logical replication needs logical. Run "
            "ALTER SYSTEM SET wal_level = logical; as a superuser and restart Postgres",
            kind=Kind.SOURCE_SETUP,
        )
    rows = _run(
        conn,
        "SELECT rolname, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user",
        action="reading the role's attributes",
    )
    rolname, may_replicate, superuser = rows[0]
    if not (may_replicate or superuser):
        raise SourceError(
            f"role {rolname} may not replicate. Run ALTER ROLE {rolname} WITH REPLICATION; "
            "as a superuser, or connect as a role that has it",
            kind=Kind.SOURCE_AUTH,
        )


# ---- publication and slot --------------------------------------------------------------


def ensure_publication(conn: SQLConnection, publication: str) -> PublicationResult:
    """Create `publication` FOR ALL TABLES (publish_via_partition_root) unless it exists."""
    check_name(publication, "STREAMBED_PUBLICATION")
    existing = _publication(conn, publication)
    if existing is not None:
        if not existing.publish_via_partition_root:
            logger.warning(
                "publication does not publish via partition root; partitions arrive as "
                "separate tables",
                extra={"fields": {"publication": publication}},
            )
        if existing.unpublished:
            left_out = ", ".join(existing.unpublished)
            logger.warning(
                f"publication does not publish {left_out}: the source's {left_out} never "
                "reach the lake, which is then not an exact copy. ALTER PUBLICATION "
                f"{publication} SET (publish = 'insert, update, delete, truncate') for one",
                extra={"fields": {"publication": publication}},
            )
        return existing
    query = sql.SQL(
        "CREATE PUBLICATION {} FOR ALL TABLES WITH (publish_via_partition_root = true)"
    ).format(sql.Identifier(publication))
    try:
        conn.execute(query)
    except psycopg.errors.DuplicateObject:  # created concurrently: not ours
        found = _publication(conn, publication)
        if found is not None:
            return found
        raise
    except psycopg.errors.InsufficientPrivilege as e:
        raise SourceError(
            f"cannot create publication {publication}: {' '.join(str(e).split())}. Create it "
            f"as a superuser: CREATE PUBLICATION {publication} FOR ALL TABLES WITH "
            "(publish_via_partition_root = true); or set STREAMBED_PUBLICATION to an existing "
            "publication",
            kind=Kind.SOURCE_SETUP,
        ) from e
    except psycopg.Error as e:
        raise source_error(_url(conn), f"creating publication {publication}", str(e)) from e
    logger.info("created publication", extra={"fields": {"publication": publication}})
    return PublicationResult(
        publication, created=True, publish_via_partition_root=True, all_tables=True
    )


def publication_exists(conn: SQLConnection, publication: str) -> bool:
    return _publication(conn, publication) is not None


def _publication(conn: SQLConnection, publication: str) -> PublicationResult | None:
    rows = _run(
        conn,
        "SELECT puballtables, pubviaroot, pubinsert, pubupdate, pubdelete, pubtruncate "
        "FROM pg_publication WHERE pubname = %s",
        (publication,),
        action="reading publications",
    )
    if not rows:
        return None
    all_tables, via_root, *published = rows[0]
    operations = ("inserts", "updates", "deletes", "truncates")
    return PublicationResult(
        publication,
        created=False,
        publish_via_partition_root=bool(via_root),
        all_tables=bool(all_tables),
        unpublished=tuple(op for op, on in zip(operations, published, strict=True) if not on),
    )


def ensure_slot(
    conn: SQLConnection,
    replication: ReplicationConnection,
    slot: str,
    *,
    export_snapshot: bool = False,
    before_create: Callable[[bool], None] | None = None,
) -> SlotResult:
    """Create the pgoutput slot `slot` unless it exists.

    `conn` (a SQL connection to the same database) looks the slot up; `replication` creates it.
    With `export_snapshot`, a created slot also returns the exported snapshot's name and the
    consistent point: copy under that snapshot, then stream from the consistent point.
    An existing slot of another plugin or database is a SOURCE_SETUP error. streambed's slot
    when the source has invalidated it (it held more WAL than `max_slot_wal_keep_size`
    allows) is dropped and created again: it can never stream again. `before_create` is
    called, with whether the slot replaces an invalidated one, before a slot is created
    (and before an invalidated one is dropped): what must be durable before the slot
    exists, since a crash after it would find the slot and never know it was new.
    """
    check_name(slot, "STREAMBED_SLOT")
    existing = _slot_row(conn, slot)
    if existing is not None and existing[3] == "lost" and _ours(conn, existing):
        if before_create is not None:
            before_create(True)
        _drop_lost(conn, slot)
        existing = None
    elif existing is None and before_create is not None:
        before_create(False)
    if existing is None:
        try:
            created: CreatedSlot = replication.create_slot(slot, export_snapshot=export_snapshot)
        except SourceError as e:
            if "already exists" not in str(e):
                raise
            existing = _slot_row(conn, slot)  # created concurrently: not ours
            if existing is None:
                raise
        else:
            logger.info("created replication slot", extra={"fields": {"slot": slot}})
            return SlotResult(
                slot,
                created=True,
                consistent_point=created.consistent_point,
                snapshot_name=created.snapshot_name,
            )
    plugin, slot_type, database, _ = existing
    if not _ours(conn, existing):
        raise SourceError(
            f"replication slot {slot} exists but is a {slot_type} slot of plugin {plugin} in "
            f"database {database}; streambed needs a logical pgoutput slot in database "
            f"{conn.info.dbname}. Set STREAMBED_SLOT to another name (streambed never drops "
            "slots it did not create)",
            kind=Kind.SOURCE_SETUP,
        )
    return SlotResult(slot, created=False)


def _slot_row(conn: SQLConnection, slot: str) -> tuple[Any, ...] | None:
    """(plugin, slot type, database, wal_status) of the slot named `slot`, if it exists."""
    rows = _run(
        conn,
        "SELECT plugin, slot_type, database, wal_status FROM pg_replication_slots "
        "WHERE slot_name = %s",
        (slot,),
        action="reading replication slots",
    )
    return rows[0] if rows else None


def _ours(conn: SQLConnection, row: tuple[Any, ...]) -> bool:
    """Whether a slot row is one streambed streams from: logical, pgoutput, this database."""
    plugin, slot_type, database, _ = row
    return bool(slot_type == "logical" and plugin == "pgoutput" and database == conn.info.dbname)


def _drop_lost(conn: SQLConnection, slot: str) -> None:
    logger.warning(
        "replication slot invalidated by the source; dropping it to create it again",
        extra={
            "fields": {
                "slot": slot,
                "why": "it held more WAL than the source's max_slot_wal_keep_size allows, so "
                "the source removed changes the lake had not received; every table is "
                "copied again",
            }
        },
    )
    _run(conn, "SELECT pg_drop_replication_slot(%s)", (slot,), action="dropping the lost slot")


# ---- catalog ---------------------------------------------------------------------------


_PUBLISHED = """
    FROM pg_publication_tables pt
    JOIN pg_publication p ON p.pubname = pt.pubname
    JOIN pg_namespace n ON n.nspname = pt.schemaname
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
    -- with publish_via_partition_root, partitions' changes arrive as their root's
    WHERE pt.pubname = %s AND NOT (p.pubviaroot AND c.relispartition)
"""
"""The tables the stream names, for one publication (`%s`): `publication_tables` and
`memberships` list the same ones."""


def publication_tables(
    conn: SQLConnection,
    publication: str,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> list[PublishedTable]:
    """Tables of the publication, sorted by schema.table, filtered by shell patterns.

    `include` empty means every table; `exclude` applies after it. Patterns match
    case-sensitively (`streambed.core.names.table_matches`): `public.*`, `sales.order_*`,
    `"Sales Dept".*`.
    """
    if _publication(conn, publication) is None:
        raise SourceError(
            f"publication {publication} does not exist in database {conn.info.dbname}; create "
            f"it (CREATE PUBLICATION {publication} FOR ALL TABLES WITH "
            "(publish_via_partition_root = true)) or set STREAMBED_PUBLICATION",
            kind=Kind.SOURCE_SETUP,
        )
    rows = _run(
        conn,
        f"""
        SELECT pt.schemaname, pt.tablename, c.oid
        {_PUBLISHED}
        ORDER BY pt.schemaname, pt.tablename
        """,
        (publication,),
        action="listing the publication's tables",
    )
    tables = [PublishedTable(schema, name, int(oid)) for schema, name, oid in rows]
    return [t for t in tables if table_selected(t.schema, t.name, include, exclude)]


Membership = frozenset[str]
"""The catalog rows that put a table in the publication: `all` (FOR ALL TABLES), `table <oid>`
(its own or an ancestor's pg_publication_rel row), `schema <oid>` (a pg_publication_namespace
row of its schema or an ancestor's). A row removed and added again gets a new oid, so a
table whose rows now share none with those seen before may have been out of the
publication in between, and its changes of that time were never sent."""


def left_and_came_back(before: Membership | None, now: Membership) -> bool:
    """Whether a table whose publication rows were `before` (None: never seen) and are `now`
    may have been out of the publication in between: every row it had is gone. A row kept
    means the table stayed published through it. Nothing to compare (no rows seen, or
    none now) is no evidence."""
    if not before or not now:
        return False
    return before.isdisjoint(now)


_MEMBERSHIP_SCHEMAS = """
    UNION ALL
    SELECT 'schema ' || pn.oid FROM pg_publication_namespace pn
    WHERE pn.pnnspid = c.relnamespace AND pn.pnpubid = p.oid
    UNION ALL
    SELECT 'schema ' || pn.oid FROM pg_partition_ancestors(c.oid) anc
    JOIN pg_class a ON a.oid = anc.relid
    JOIN pg_publication_namespace pn ON pn.pnnspid = a.relnamespace AND pn.pnpubid = p.oid
    WHERE anc.relid <> c.oid
"""


def memberships(
    conn: SQLConnection,
    publication: str,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> dict[tuple[str, str], Membership]:
    """Each table the publication streams (as `publication_tables` lists them), with the
    catalog rows that put it there (`Membership`): its own, then its ancestors' if it is a
    partition, each looked up by index (a query joining an ancestors list with
    pg_publication_rel is far slower on many listed tables, and this runs every
    `streambed.copy.streamed.MEMBERSHIP_POLL_SECONDS`)."""
    schemas = _MEMBERSHIP_SCHEMAS if conn.info.server_version >= 150000 else ""
    rows = _run(
        conn,
        f"""
        SELECT pt.schemaname, pt.tablename, ARRAY(
            SELECT 'all' WHERE p.puballtables
            UNION ALL
            SELECT 'table ' || pr.oid FROM pg_publication_rel pr
            WHERE pr.prrelid = c.oid AND pr.prpubid = p.oid
            UNION ALL
            SELECT 'table ' || pr.oid FROM pg_partition_ancestors(c.oid) anc
            JOIN pg_publication_rel pr ON pr.prrelid = anc.relid AND pr.prpubid = p.oid
            WHERE anc.relid <> c.oid
            {schemas}
        )
        {_PUBLISHED}
        """,
        (publication,),
        action="reading the publication's tables",
    )
    return {
        (schema, name): frozenset(found)
        for schema, name, found in rows
        if table_selected(schema, name, include, exclude)
    }


def streamed_by_root(
    conn: SQLConnection, publication: str, relation_ids: Sequence[int]
) -> set[int]:
    """Those of `relation_ids` that are partitions whose changes the publication sends as
    their root's (`publish_via_partition_root`): they are not tables of their own in the
    lake."""
    found = _publication(conn, publication)
    if found is None or not found.publish_via_partition_root or not relation_ids:
        return set()
    rows = _run(
        conn,
        "SELECT oid FROM pg_class WHERE oid = ANY(%s::oid[]) AND relispartition",
        (list(relation_ids),),
        action="looking for partitions",
    )
    return {int(oid) for (oid,) in rows}


def table_key(conn: SQLConnection, relation_id: int) -> SourceKey:
    """Primary key columns (index order) and replica identity of one table."""
    ident = _run(
        conn,
        "SELECT relreplident FROM pg_class WHERE oid = %s",
        (relation_id,),
        action="reading the table's replica identity",
    )
    if not ident:
        raise SourceError(
            f"table with relation id {relation_id} no longer exists on the source",
            kind=Kind.SOURCE_SETUP,
        )
    replica_identity = str(ident[0][0])
    primary_key = _index_columns(conn, relation_id, "indisprimary")
    if replica_identity == "d":
        identity = primary_key
    elif replica_identity == "i":
        identity = _index_columns(conn, relation_id, "indisreplident")
    else:
        identity = ()
    return SourceKey(primary_key, replica_identity, identity)


def _index_columns(conn: SQLConnection, relation_id: int, flag: str) -> tuple[str, ...]:
    rows = _run(
        conn,
        sql.SQL(
            """
            SELECT a.attname
            FROM pg_index i
            CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
            WHERE i.indrelid = %s AND i.{}
            ORDER BY k.ord
            """
        ).format(sql.Identifier(flag)),
        (relation_id,),
        action="reading the table's key columns",
    )
    return tuple(str(r[0]) for r in rows)


def current_wal_lsn(conn: SQLConnection) -> int:
    rows = _run(conn, "SELECT pg_current_wal_lsn()::text", action="reading the current WAL LSN")
    return parse_lsn(rows[0][0])


def slot_health(conn: SQLConnection, slot: str) -> SlotHealth | None:
    """The slot's state and the WAL it holds; None when it does not exist."""
    rows = _run(
        conn,
        """
        SELECT active, wal_status,
               pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,
               pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,
               safe_wal_size
        FROM pg_replication_slots WHERE slot_name = %s
        """,
        (slot,),
        action="reading the replication slot",
    )
    if not rows:
        return None
    active, wal_status, unacknowledged, retained, safe = rows[0]
    return SlotHealth(bool(active), wal_status, unacknowledged, retained, safe)


def slot_position(conn: SQLConnection, slot: str) -> SlotPosition | None:
    """confirmed_flush_lsn and restart_lsn of a slot; None when it does not exist."""
    rows = _run(
        conn,
        """
        SELECT confirmed_flush_lsn::text, restart_lsn::text, active, active_pid
        FROM pg_replication_slots WHERE slot_name = %s
        """,
        (slot,),
        action="reading the replication slot",
    )
    if not rows:
        return None
    confirmed, restart, active, pid = rows[0]
    return SlotPosition(
        confirmed_flush_lsn=parse_lsn(confirmed) if confirmed is not None else None,
        restart_lsn=parse_lsn(restart) if restart is not None else None,
        active=bool(active),
        active_pid=pid,
    )
