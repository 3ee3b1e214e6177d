"""What the lake needs to know about source tables beyond pgoutput's Relation messages.

Relation messages carry column names, type OIDs and modifiers only. Following schema
changes exactly needs three more facts, read from the source's catalog:

- the *attnum* of each column, which survives a RENAME (so a rename stays a rename in
  Iceberg, not a drop plus an add);
- the value existing rows have for a column added later (`attmissingval`, Postgres'
  "fast default"), since pgoutput never sends rows that an ALTER TABLE did not touch;
  and whether those values are unknowable from the WAL at all: a column added with a
  volatile default (`random()`, `clock_timestamp()`, `nextval()`, an identity) makes
  Postgres rewrite the table, and the values it wrote are never decoded;
- the base type of a domain (pgoutput sends the domain's own OID).

`SourceCatalog` is the protocol; `PostgresCatalog` reads a live Postgres. Lookups reflect
the source's *current* catalog, not its state at the WAL position being applied (see
docs/types.md, "Schema changes", for what that means).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

from streambed.lake import declared
from streambed.lake.declared import SourceFacts

logger = logging.getLogger("streambed.lake")

# A column default that is a constant: a literal with optional casts, a number, a boolean.
_CONSTANT = re.compile(
    r"^\(?(?:'(?:[^']|'')*'|-?[0-9.]+(?:e[+-]?[0-9]+)?|true|false)\)?(?:::[a-z0-9_ .\[\]()\"]+)*$",
    re.IGNORECASE,
)

FIRST_USER_OID = 16384
"""OIDs below this are built-in types (never domains)."""


@dataclass(frozen=True)
class SourceColumn:
    """One live column of a source table.

    `missing` is the text form of the value rows written before the column was added
    have (Postgres' fast default), None when those rows have NULL. `has_missing` says
    whether Postgres recorded such a value at all. `unknown_default` is set when it did
    not, but the column has a default that is not a constant (or is an identity or a
    stored generated column): rows that existed when it was added may hold any value,
    written by a table rewrite the WAL does not carry; it is the default's expression.
    """

    attnum: int
    name: str
    has_missing: bool = False
    missing: str | None = None
    unknown_default: str | None = None


class SourceCatalog(Protocol):
    def columns(
        self, relation_id: int, missing_known: Collection[str] = ()
    ) -> dict[str, SourceColumn] | None:
        """name → column for the table's live columns; None when the table is gone.
        `missing` is looked up for columns not in `missing_known` (the lake has them)."""
        ...

    def base_types(self, type_oids: Collection[int]) -> dict[int, tuple[int, int]]:
        """domain OID → (base type OID, base type modifier), for the domains among
        `type_oids` (nested domains resolved to the final base type)."""
        ...

    def facts(self, relation_id: int, names: list[str]) -> SourceFacts:
        """The declared types, NOT NULL and foreign keys of the table's columns `names`
        (`streambed.lake.declared`)."""
        ...


class PostgresCatalog:
    """`SourceCatalog` on a live Postgres (a plain SQL connection, opened on first use)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None
        self._bases: dict[int, tuple[int, int] | None] = {}

    def columns(
        self, relation_id: int, missing_known: Collection[str] = ()
    ) -> dict[str, SourceColumn] | None:
        rows = self._query(
            "SELECT a.attnum, a.attname, a.atthasmissing, "
            "format_type(a.atttypid, NULL), a.attidentity, a.attgenerated FROM pg_attribute a "
            "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (relation_id,),
        )
        if not rows:
            return None
        out: dict[str, SourceColumn] = {}
        for attnum, name, has_missing, type_name, identity, generated in rows:
            missing: str | None = None
            unknown: str | None = None
            if name not in missing_known:
                if has_missing:
                    # attmissingval is a one-element array of the column's type: take the
                    # element's own text form.
                    # Read in text format: the type's output function, what pgoutput sends
                    # (bool::text would give 'true', the output function 't').
                    missing = self._text(
                        f"SELECT (attmissingval::text::{type_name}[])[1] FROM pg_attribute "
                        f"WHERE attrelid = {int(relation_id)} AND attnum = {int(attnum)}"
                    )
                    # Postgres records no NULL fast default: NULL here means a table
                    # rewrite committed between the two lookups and forgot it (below).
                    has_missing = missing is not None
                if not has_missing:
                    # A later table rewrite in the source (ALTER COLUMN TYPE, VACUUM FULL)
                    # materialises the fast default into the rows and forgets it; a
                    # constant column default is then the best account of what old rows
                    # hold.
                    default = self._text(
                        "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                        f"WHERE adrelid = {int(relation_id)} AND adnum = {int(attnum)}"
                    )
                    if default is not None and _CONSTANT.match(default):
                        missing = self._text(f"SELECT ({default})::{type_name}")
                        has_missing = missing is not None
                    elif default is not None:
                        # Not a constant: when the column was added, Postgres either recorded
                        # the value once (a stable default like now(): has_missing, above) or,
                        # for a volatile one, rewrote the table with a value per row.
                        unknown = default
                    elif identity or generated:
                        unknown = "GENERATED ALWAYS AS IDENTITY" if identity else "GENERATED"
            out[str(name)] = SourceColumn(
                int(attnum), str(name), bool(has_missing), missing, unknown
            )
        return out

    def base_types(self, type_oids: Collection[int]) -> dict[int, tuple[int, int]]:
        wanted = [o for o in set(type_oids) if o >= FIRST_USER_OID and o not in self._bases]
        if wanted:
            rows = self._query(
                "WITH RECURSIVE d(oid, base, typmod, depth) AS ("
                " SELECT oid, typbasetype, typtypmod, 0 FROM pg_type"
                " WHERE oid = ANY(%s) AND typtype = 'd'"
                " UNION ALL SELECT d.oid, t.typbasetype, "
                " CASE WHEN d.typmod = -1 THEN t.typtypmod ELSE d.typmod END, d.depth + 1"
                " FROM d JOIN pg_type t ON t.oid = d.base AND t.typtype = 'd')"
                " SELECT DISTINCT ON (oid) oid, base, typmod FROM d ORDER BY oid, depth DESC",
                (wanted,),
            )
            found = {int(oid): (int(base), int(typmod)) for oid, base, typmod in rows}
            for oid in wanted:
                self._bases[oid] = found.get(oid)
        out: dict[int, tuple[int, int]] = {}
        for oid in type_oids:
            base = self._bases.get(oid)
            if base is not None:
                out[oid] = base
        return out

    def facts(self, relation_id: int, names: list[str]) -> SourceFacts:
        columns = self._query(declared.COLUMNS_SQL, (relation_id,))
        keys = self._query(declared.FOREIGN_KEYS_SQL, (relation_id,))
        return declared.facts_from_rows(columns, keys, names)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _text(self, sql: str) -> str | None:
        """The first value of `sql`'s result in Postgres text format (None for NULL)."""
        self._query("SELECT 1", ())  # connects (and reconnects) like every other lookup
        result = self._conn.pgconn.exec_(sql.encode())
        if result.ntuples == 0:
            return None
        value = result.get_value(0, 0)
        return None if value is None else bytes(value).decode()

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        import psycopg

        from streambed.core.errors import Kind, SourceError

        for attempt in (1, 2):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.url, autocommit=True)
                return list(self._conn.execute(sql, params).fetchall())
            except psycopg.OperationalError as e:
                self.close()
                if attempt == 2:
                    raise SourceError(
                        f"cannot read the source catalog: {e}", kind=Kind.SOURCE_UNREACHABLE
                    ) from e
        raise AssertionError("unreachable")
