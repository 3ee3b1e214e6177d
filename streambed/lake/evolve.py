"""Follow a source table's schema changes in its lake table.

A Relation message that no longer matches the lake table is turned into a `SchemaPlan`
(pure: `plan_schema_change`) and carried out by `evolve_table` as ONE Iceberg transaction:

- RENAME COLUMN: a lake column whose name left the relation and a new relation column
  with the same *attnum* (read from the source catalog, remembered in the table property
  `streambed.attnums`) is a rename: `rename_column`, same field id, data untouched.
- ADD COLUMN: a new field. Rows already in the lake get the value they have in the
  source: Postgres' fast default (`attmissingval`) when it recorded one, else NULL. A
  non-NULL default rewrites the table's data files with that value filled in. A column
  added with a volatile default (`random()`, `clock_timestamp()`, `nextval()`, an
  identity) made Postgres rewrite the source table with a value per row that the WAL never
  carries: when the lake table has rows, `ResyncNeeded` is raised before anything is
  written, and the table must be copied again (`streambed run` does that by itself).
- DROP COLUMN: the field is deleted (old data files keep the bytes; readers skip them).
- Type widening Iceberg allows (int→long, float→double, decimal precision increase):
  `update_column`; old files are read as the wider type.
- Any other type change is *incompatible*: with `on_incompatible="stop"` a SchemaError
  names the column and the fix; with `"rewrite"` the column is replaced by a new field of
  the new type and every data file is rewritten, each old value converted through its
  Postgres text form (what `old::text::new` gives in the source).
- A key change updates `streambed.key`.

The frontier (`streambed.lsn`) of a rewrite snapshot is the table's current one: a
schema change moves no data forward. Limits are listed in docs/types.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DecimalType, DoubleType, FloatType, IcebergType, IntegerType, LongType

from streambed.buffer.changes import TableKey
from streambed.core.errors import SchemaError
from streambed.lake.commit import SUMMARY_LSN, data_file, frontier
from streambed.lake.delete_manifest import delta_overwrite
from streambed.lake.deletes import current_files, deletes_by_data_file, pending_positions
from streambed.lake.files import write_parquet
from streambed.lake.merge.contract import without_positions
from streambed.lake.source_catalog import SourceColumn
from streambed.lake.storage import resolve
from streambed.lake.tables import PROP_KEY, arrow_schema_of_schema, key_columns
from streambed.lake.transaction import transaction
from streambed.lake.types import column_type
from streambed.pgoutput.messages import Relation

logger = logging.getLogger("streambed.lake")

PROP_ATTNUMS: Final = "streambed.attnums"  # JSON {column name: source attnum}

OnIncompatible = Literal["stop", "rewrite"]


class ResyncNeeded(SchemaError):
    """The lake table cannot follow the source by itself: its rows must be copied again."""

    def __init__(
        self,
        table: tuple[str, str],
        columns: tuple[tuple[str, str], ...],
        reason: str | None = None,
    ) -> None:
        self.table = table
        self.columns = columns
        qualified = ".".join(table)
        if reason is None:
            added = ", ".join(f"{name} (DEFAULT {default})" for name, default in columns)
            reason = (
                f"column {added} was added with a default that is not a constant, so Postgres "
                "rewrote the table and the values existing rows got never appear in the "
                "replication stream"
            )
        super().__init__(
            f"{qualified}: {reason}. Nothing was written to the lake table. Fix: run "
            f"`streambed resync {qualified}` (a running `streambed run` copies it again)"
        )


@dataclass(frozen=True)
class SchemaPlan:
    """What changes between the lake table and the relation (names are lake names, after
    renames for `adds`/`widens`/`retypes`)."""

    renames: tuple[tuple[str, str], ...] = ()  # (old name, new name)
    adds: tuple[tuple[str, IcebergType, str | None], ...] = ()  # (name, type, value for old rows)
    drops: tuple[str, ...] = ()
    widens: tuple[tuple[str, IcebergType], ...] = ()
    retypes: tuple[tuple[str, IcebergType, IcebergType], ...] = ()  # (name, lake, source)
    # added columns whose values in existing rows the WAL never carried: (name, default)
    unknown: tuple[tuple[str, str], ...] = ()
    # lake columns gone without a recorded attnum while others appeared: a rename cannot be
    # told from a drop and an add (the live catalog had moved on when they were recorded)
    ambiguous: tuple[str, ...] = ()
    key: tuple[str, ...] | None = None  # the new key, when it changed
    attnums: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.renames or self.adds or self.drops or self.widens or self.retypes) and (
            self.key is None
        )

    def describe(self) -> str:
        parts = [f"rename {a} to {b}" for a, b in self.renames]
        parts += [
            f"add {n} {t}" + ("" if v is None else f" (old rows: {v})") for n, t, v in self.adds
        ]
        parts += [f"drop {n}" for n in self.drops]
        parts += [f"widen {n} to {t}" for n, t in self.widens]
        parts += [f"retype {n} from {a} to {b}" for n, a, b in self.retypes]
        if self.key is not None:
            parts.append(f"key {list(self.key)}")
        return "; ".join(parts) or "no change"


def widens(old: IcebergType, new: IcebergType) -> bool:
    """True when Iceberg allows promoting `old` to `new` in place."""
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    return (
        isinstance(old, DecimalType)
        and isinstance(new, DecimalType)
        and old.scale == new.scale
        and new.precision > old.precision
    )


def plan_schema_change(
    schema: Schema,
    attnums: Mapping[str, int],
    lake_key: tuple[str, ...],
    relation: Relation,
    key: TableKey,
    source: Mapping[str, SourceColumn] | None,
) -> SchemaPlan:
    """The changes that make a lake table with `schema` match `relation`. Pure.

    `attnums` are the lake columns' source attnums as last recorded; `source` the source
    table's live columns (None when unknown: renames then look like drop + add).
    """
    lake = {f.name: f.field_type for f in schema.fields}
    wanted = {c.name: column_type(c).iceberg for c in relation.columns}
    new_attnums = {n: s.attnum for n, s in (source or {}).items() if n in wanted}
    added = [n for n in wanted if n not in lake]
    gone = [n for n in lake if n not in wanted]
    renames: list[tuple[str, str]] = []
    for name in list(added):
        attnum = new_attnums.get(name)
        old = next((g for g in gone if attnum is not None and attnums.get(g) == attnum), None)
        if old is not None:
            renames.append((old, name))
            gone.remove(old)
            added.remove(name)
            lake[name] = lake.pop(old)
    ambiguous = tuple(g for g in gone if g not in attnums) if source and added else ()
    adds = []
    unknown = []
    for name in added:
        column = (source or {}).get(name)
        adds.append((name, wanted[name], column.missing if column is not None else None))
        if column is not None and column.unknown_default is not None:
            unknown.append((name, column.unknown_default))
    widen: list[tuple[str, IcebergType]] = []
    retypes: list[tuple[str, IcebergType, IcebergType]] = []
    for name, new_type in wanted.items():
        old_type = lake.get(name)
        if old_type is None or old_type == new_type:
            continue
        if widens(old_type, new_type):
            widen.append((name, new_type))
        else:
            retypes.append((name, old_type, new_type))
    # Attnums of the resulting columns: the source's where it knows the name (it may have
    # moved on: a later rename), else what the lake recorded under the old name.
    recorded = {new: attnums[old] for old, new in renames if old in attnums}
    recorded.update({n: a for n, a in attnums.items() if n in wanted})
    recorded.update(new_attnums)
    key_names = tuple(relation.columns[i].name for i in key.columns)
    renamed_key = tuple(dict(renames).get(k, k) for k in lake_key)
    return SchemaPlan(
        renames=tuple(renames),
        adds=tuple(adds),
        drops=tuple(gone),
        widens=tuple(widen),
        retypes=tuple(retypes),
        unknown=tuple(unknown),
        ambiguous=ambiguous,
        key=None if key_names == renamed_key else key_names,
        attnums={n: recorded[n] for n in wanted if n in recorded},
    )


def evolve_table(
    table: Table,
    relation: Relation,
    key: TableKey,
    source: Mapping[str, SourceColumn] | None,
    on_incompatible: OnIncompatible,
) -> Table:
    """Make `table` match `relation` (one Iceberg transaction); returns the refreshed table."""
    name = ".".join(table.name())
    attnums = json.loads(table.properties.get(PROP_ATTNUMS, "{}"))
    plan = plan_schema_change(table.schema(), attnums, key_columns(table), relation, key, source)
    if plan.empty:
        if plan.attnums and plan.attnums != attnums:
            with table.transaction() as tx:
                tx.set_properties({PROP_ATTNUMS: json.dumps(plan.attnums)})
        return table
    if plan.retypes and on_incompatible == "stop":
        changes = ", ".join(f"{n} from {a} to {b}" for n, a, b in plan.retypes)
        raise SchemaError(
            f"{name}: a column changed type in a way Iceberg cannot follow in place ({changes}). "
            "Nothing was written. Fix: set STREAMBED_ON_INCOMPATIBLE_SCHEMA=rewrite to rewrite "
            "the lake table with the new type, or drop the lake table to copy it again"
        )
    files = current_files(table)
    live = files.data
    if plan.unknown and live:
        raise ResyncNeeded((relation.namespace, relation.name), plan.unknown)
    if plan.ambiguous and live:
        added = [n for n, _, _ in plan.adds]
        raise ResyncNeeded(
            (relation.namespace, relation.name),
            (),
            f"column {', '.join(plan.ambiguous)} disappeared while {', '.join(added)} "
            "appeared, and the source catalog had moved on before their positions were "
            "recorded, so a rename cannot be told from a drop and an add",
        )
    logger.info("schema change table=%s changes=%s", name, plan.describe())
    old_schema = table.schema()
    retyped_ids = {n: old_schema.find_field(n).field_id for n, _, _ in plan.retypes}
    fills = {n: v for n, _, v in plan.adds if v is not None}
    lsn = frontier(table)
    with transaction(table) as tx:
        with tx.update_schema(allow_incompatible_changes=True) as update:
            for old, new in plan.renames:
                update.rename_column(old, new)
            for column in plan.drops:
                update.delete_column(column)
            for column, new_type in plan.widens:
                update.update_column(column, field_type=new_type)
            for column, _, _ in plan.retypes:
                update.delete_column(column)
        if plan.adds or plan.retypes:
            with tx.update_schema() as update:
                for column, new_type, _ in plan.adds:
                    update.add_column(column, new_type)
                for column, _, new_type in plan.retypes:
                    update.add_column(column, new_type)
        properties = {PROP_ATTNUMS: json.dumps(plan.attnums)}
        if plan.key is not None:
            properties[PROP_KEY] = json.dumps(list(plan.key))
        tx.set_properties(properties)
        if (fills or plan.retypes) and live:
            new_schema = tx.table_metadata.schema()
            target = arrow_schema_of_schema(new_schema)
            written: list[str] = []
            hidden = pending_positions(table, deletes_by_data_file(files.deletes.values(), live))
            for path in live:
                rows = _rewritten(path, table, target, relation, fills, retyped_ids)
                rows = without_positions(rows, hidden.get(path))
                written += write_parquet(table, rows, sort_by_key=False, schema=target)
            summary = {} if lsn is None else {SUMMARY_LSN: str(lsn)}
            with delta_overwrite(tx, summary) as overwrite:
                for old_file in live.values():
                    overwrite.delete_data_file(old_file)
                for delete_file in files.deletes.values():
                    overwrite.remove_delete_file(delete_file)
                for path in written:
                    overwrite.append_data_file(data_file(table.io, tx.table_metadata, path))
    table.refresh()
    return table


def _rewritten(
    path: str,
    table: Table,
    target: pa.Schema,
    relation: Relation,
    fills: Mapping[str, str],
    retyped_ids: Mapping[str, int],
) -> pa.Table:
    """One old data file's rows in the new schema (matched by field id, values filled or
    converted)."""
    from streambed.lake.convert import convert_column
    from streambed.server import pgtypes

    fs, fs_path = resolve(path, table.io.properties)
    with fs.open_input_file(fs_path) as f:
        old = pq.read_table(f)
    by_id: dict[int, pa.ChunkedArray] = {}
    for index, old_field in enumerate(old.schema):
        if old_field.metadata and b"PARQUET:field_id" in old_field.metadata:
            by_id[int(old_field.metadata[b"PARQUET:field_id"])] = old.column(index)
    columns = {c.name: c for c in relation.columns}
    arrays = []
    for target_field in target:
        field_id = int(target_field.metadata[b"PARQUET:field_id"])
        column = columns.get(target_field.name)
        if target_field.name in retyped_ids and column is not None:
            source_array = by_id.get(retyped_ids[target_field.name])
            if source_array is None:
                values: list[bytes | None] = [None] * old.num_rows
            else:
                combined = source_array.combine_chunks()
                values = pgtypes.encode_text_column(
                    combined, pgtypes.pg_type_for_arrow(combined.type)
                )
            array, _ = convert_column(values, column_type(column), where=target_field.name)
        elif field_id in by_id:
            array = by_id[field_id].combine_chunks().cast(target_field.type)
        elif target_field.name in fills and column is not None:
            text = fills[target_field.name].encode()
            array, _ = convert_column([text] * old.num_rows, column_type(column))
        else:
            array = pa.nulls(old.num_rows, target_field.type)
        arrays.append(array.cast(target_field.type))
    return pa.Table.from_arrays(arrays, schema=target)
