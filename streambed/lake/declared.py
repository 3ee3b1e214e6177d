"""The source's own account of a table, recorded with its lake table for the query server.

The lake stores some Postgres types in a wider form (jsonb, arrays, uuid as strings;
varchar(20) as string) and keeps NOT NULL only for key columns. What the source declares
is recorded as lake table properties, so every query server reading the catalog (the one
in `streambed run`, or `streambed serve` in another process) shows the table as the source
does (`streambed.server.catalog`):

- `streambed.source-columns`: JSON list, per column in lake order,
  `[name, type oid, type modifier, not null]`; a domain is given as its base type;
- `streambed.foreign-keys`: JSON list of foreign keys, each
  `{"name", "columns", "references": [schema, table], "referenced", "on_update",
  "on_delete", "match", "deferrable", "deferred"}` (the actions and match type are
  pg_constraint's one-letter codes).

The facts are read from the source's catalog when a lake table is created or its layout
changes (a copy, a Relation message), so a constraint added later in the source shows
once the table is next copied, altered or streambed restarts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

logger = logging.getLogger("streambed.lake")

PROP_COLUMNS: Final = "streambed.source-columns"
PROP_FOREIGN_KEYS: Final = "streambed.foreign-keys"


@dataclass(frozen=True)
class DeclaredColumn:
    name: str
    type_oid: int
    typmod: int
    not_null: bool


@dataclass(frozen=True)
class ForeignKey:
    name: str
    columns: tuple[str, ...]
    ref_schema: str
    ref_table: str
    ref_columns: tuple[str, ...]
    on_update: str = "a"  # a no action, r restrict, c cascade, n set null, d set default
    on_delete: str = "a"
    match: str = "s"  # s simple, f full, p partial
    deferrable: bool = False
    deferred: bool = False


@dataclass(frozen=True)
class SourceFacts:
    columns: tuple[DeclaredColumn, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()

    def properties(self) -> dict[str, str]:
        """The lake table properties that record these facts."""
        columns = [[c.name, c.type_oid, c.typmod, c.not_null] for c in self.columns]
        keys = [
            {
                "name": k.name,
                "columns": list(k.columns),
                "references": [k.ref_schema, k.ref_table],
                "referenced": list(k.ref_columns),
                "on_update": k.on_update,
                "on_delete": k.on_delete,
                "match": k.match,
                "deferrable": k.deferrable,
                "deferred": k.deferred,
            }
            for k in self.foreign_keys
        ]
        return {
            PROP_COLUMNS: json.dumps(columns, separators=(",", ":")),
            PROP_FOREIGN_KEYS: json.dumps(keys, separators=(",", ":")),
        }


def facts_of(properties: Mapping[str, str]) -> SourceFacts:
    """The facts recorded in a lake table's properties (none for a table recorded before
    they were, or with properties that cannot be read)."""
    try:
        columns = tuple(
            DeclaredColumn(str(name), int(oid), int(typmod), bool(not_null))
            for name, oid, typmod, not_null in json.loads(properties.get(PROP_COLUMNS, "[]"))
        )
        keys = tuple(
            ForeignKey(
                str(k["name"]),
                tuple(str(c) for c in k["columns"]),
                str(k["references"][0]),
                str(k["references"][1]),
                tuple(str(c) for c in k["referenced"]),
                str(k.get("on_update", "a")),
                str(k.get("on_delete", "a")),
                str(k.get("match", "s")),
                bool(k.get("deferrable", False)),
                bool(k.get("deferred", False)),
            )
            for k in json.loads(properties.get(PROP_FOREIGN_KEYS, "[]"))
        )
    except (ValueError, TypeError, KeyError, IndexError) as e:
        logger.warning("ignoring unreadable source facts of a lake table: %s", e)
        return SourceFacts()
    return SourceFacts(columns, keys)


COLUMNS_SQL: Final = """
SELECT a.attname, CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END,
       CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, a.attnotnull
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum"""

FOREIGN_KEYS_SQL: Final = """
SELECT c.conname, fn.nspname, f.relname,
       ARRAY(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i),
       ARRAY(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i),
       c.confupdtype, c.confdeltype, c.confmatchtype, c.condeferrable, c.condeferred
FROM pg_constraint c JOIN pg_class f ON f.oid = c.confrelid
JOIN pg_namespace fn ON fn.oid = f.relnamespace
WHERE c.conrelid = %s AND c.contype = 'f'
ORDER BY c.conname"""


def facts_from_rows(
    columns: list[tuple[Any, ...]], foreign_keys: list[tuple[Any, ...]], names: list[str]
) -> SourceFacts:
    """Facts from the rows of `COLUMNS_SQL` and `FOREIGN_KEYS_SQL`, for the lake columns
    `names` (a column the lake does not hold is left out, and so is a foreign key on it)."""
    by_name = {str(r[0]): r for r in columns}
    declared = tuple(
        DeclaredColumn(n, int(by_name[n][1]), int(by_name[n][2]), bool(by_name[n][3]))
        for n in names
        if n in by_name
    )
    present = set(names)
    keys = []
    for name, schema, table, cols, refs, *rules in foreign_keys:
        if not set(map(str, cols)) <= present:
            continue
        update, delete, match, deferrable, deferred = rules
        keys.append(
            ForeignKey(
                str(name), tuple(map(str, cols)), str(schema), str(table),
                tuple(map(str, refs)), str(update), str(delete), str(match),
                bool(deferrable), bool(deferred),
            )
        )  # fmt: skip
    return SourceFacts(declared, tuple(keys))


def read_facts(conn: Any, relation_id: int, names: list[str]) -> SourceFacts:
    """The facts of source table `relation_id` for lake columns `names`, read on a psycopg
    connection."""
    columns = list(conn.execute(COLUMNS_SQL, (relation_id,)).fetchall())
    keys = list(conn.execute(FOREIGN_KEYS_SQL, (relation_id,)).fetchall())
    return facts_from_rows(columns, keys, names)


def record_facts(table: Table, facts: SourceFacts) -> Table:
    """`table` with `facts` recorded in its properties (one commit, only when they
    changed). Best effort: a failed commit is logged and tried again at the next change."""
    wanted = facts.properties()
    if all(table.properties.get(k) == v for k, v in wanted.items()):
        return table
    try:
        with table.transaction() as tx:
            tx.set_properties(wanted)
        return table.refresh()
    except (CommitFailedException, OSError) as e:
        logger.warning(
            "cannot record the source's columns and foreign keys of lake table %s: %s",
            ".".join(table.name()),
            " ".join(str(e).split()),
        )
        return table
