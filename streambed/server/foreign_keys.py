"""Foreign keys of replicated tables as pg_constraint rows ('f').

A foreign key is shown when both its table and the table it references are served, with
the columns on both sides; one that references a table streambed does not replicate is
left out (no client could follow it). `conindid` is the referenced table's primary key
index when the referenced columns are its key (the only unique index the catalog has).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from streambed.lake.declared import ForeignKey

_ACTIONS = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


@dataclass(frozen=True)
class Served:
    """What the catalog knows of one served table."""

    oid: int
    namespace_oid: int
    positions: Mapping[str, int]  # column name -> attnum
    primary_key: tuple[str, ...]
    pk_index_oid: int


@dataclass(frozen=True)
class ForeignKeyRow:
    conrelid: int
    confrelid: int
    conkey: list[int]
    confkey: list[int]
    conindid: int
    definition: str


def foreign_key_rows(
    key: ForeignKey,
    served: Served,
    tables: Mapping[tuple[str, str], Served],
    quote: Callable[[str], str],
) -> ForeignKeyRow | None:
    """The pg_constraint facts of `key` on table `served`, or None when it cannot be shown
    (the referenced table or one of the columns is not served)."""
    target = tables.get((key.ref_schema, key.ref_table))
    if target is None or len(key.columns) != len(key.ref_columns):
        return None
    if not all(c in served.positions for c in key.columns):
        return None
    if not all(c in target.positions for c in key.ref_columns):
        return None
    columns = ", ".join(quote(c) for c in key.columns)
    referenced = ", ".join(quote(c) for c in key.ref_columns)
    # Postgres qualifies the table when it is not on the search path; here: outside public
    table = quote(key.ref_table)
    if key.ref_schema != "public":
        table = f"{quote(key.ref_schema)}.{table}"
    definition = f"FOREIGN KEY ({columns}) REFERENCES {table}({referenced})"
    if key.match == "f":
        definition += " MATCH FULL"
    if key.on_update != "a":
        definition += f" ON UPDATE {_ACTIONS.get(key.on_update, 'NO ACTION')}"
    if key.on_delete != "a":
        definition += f" ON DELETE {_ACTIONS.get(key.on_delete, 'NO ACTION')}"
    if key.deferrable:
        definition += " DEFERRABLE" + (" INITIALLY DEFERRED" if key.deferred else "")
    is_pk = set(key.ref_columns) == set(target.primary_key) and bool(target.primary_key)
    return ForeignKeyRow(
        conrelid=served.oid,
        confrelid=target.oid,
        conkey=[served.positions[c] for c in key.columns],
        confkey=[target.positions[c] for c in key.ref_columns],
        conindid=target.pk_index_oid if is_pk else 0,
        definition=definition,
    )
