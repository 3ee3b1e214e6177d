"""Apply one table's delta to the lake: convert, plan, write, commit.

A delta of new keys only is an append: Parquet is written straight from Arrow. Anything
that removes rows is planned with `plan_merge` (only files whose key bounds can hold a
removed key are touched) and, when files must be rewritten, carried out on Spark. The
Iceberg commit records the delta's commit LSN as the table's frontier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from streambed.changes import TableDelta
from streambed.errors import Kind, StreambedError
from streambed.failpoints import failpoint
from streambed.lake.commit import commit, frontier
from streambed.lake.convert import keys_to_arrow, rows_to_arrow
from streambed.lake.files import data_files, write_parquet
from streambed.lake.tables import arrow_schema, ensure_table, key_columns
from streambed.merge.executor import SparkMerger
from streambed.merge.plan import plan_merge
from streambed.pgoutput.messages import Relation

logger = logging.getLogger("streambed.sink")


class IcebergSink:
    """The lake side of the pipeline. `merger` is created on first need (Spark starts slowly)."""

    def __init__(self, catalog: Catalog, merger: Callable[[], SparkMerger]) -> None:
        self.catalog = catalog
        self._merger_factory = merger
        self._merger: SparkMerger | None = None
        self._tables: dict[tuple[str, str], Table] = {}
        self._relations: dict[tuple[str, str], Relation] = {}

    def load(self, names: Iterable[tuple[str, str]]) -> None:
        """Open existing lake tables, so watermarks list them before their first change."""
        for name in names:
            table = self._existing(name)
            if table is not None:
                self._tables[name] = table

    def frontier(self, schema: str, name: str) -> int | None:
        table = self._tables.get((schema, name)) or self._existing((schema, name))
        return None if table is None else frontier(table)

    def metadata_locations(self) -> Mapping[tuple[str, str], str]:
        return {name: table.metadata_location for name, table in self._tables.items()}

    def apply(self, delta: TableDelta) -> str:
        table = self._table(delta)
        schema = arrow_schema(table)
        converted = rows_to_arrow(delta.relation, delta.rows, schema)
        removed: list[str] = []
        if delta.append_only:
            if converted.unchanged:
                raise StreambedError(
                    f"{_qualified(delta)}: an unchanged TOAST value arrived for a new row",
                    kind=Kind.INTERNAL,
                )
            added = write_parquet(table, converted.table)
        else:
            keys = keys_to_arrow(delta.relation, delta.key, delta.removed_keys, schema)
            plan = plan_merge(data_files(table), _tuples(keys), truncated=delta.truncated)
            logger.debug("merge plan for %s: %s", _qualified(delta), plan.describe())
            removed = [f.path for f in (*plan.rewrite, *plan.drop)]
            if plan.rewrite:
                added = self.merger.execute(
                    plan,
                    rows=converted.table,
                    removed_keys=keys,
                    unchanged=converted.unchanged,
                    key_columns=key_columns(table),
                    full_row=delta.key.full_row,
                    arrow_schema=schema,
                    output_dir=f"{table.location()}/data",
                )
            elif converted.unchanged and not delta.truncated:
                raise StreambedError(
                    f"{_qualified(delta)}: an update left a large value unchanged, but the "
                    "row it belongs to is not in the lake; the lake is missing rows: "
                    "resync this table",
                    kind=Kind.STATE,
                )
            else:
                added = write_parquet(table, converted.table)
        failpoint("after_parquet_write")
        location = commit(table, removed=removed, added=added, lsn=delta.commit_lsn)
        failpoint("after_table_commit")
        return location

    @property
    def merger(self) -> SparkMerger:
        if self._merger is None:
            self._merger = self._merger_factory()
        return self._merger

    def _table(self, delta: TableDelta) -> Table:
        name = (delta.schema_name, delta.table_name)
        if self._relations.get(name) != delta.relation or name not in self._tables:
            self._tables[name] = ensure_table(self.catalog, delta.relation, delta.key)
            self._relations[name] = delta.relation
        return self._tables[name]

    def _existing(self, name: tuple[str, str]) -> Table | None:
        try:
            return self.catalog.load_table(name)
        except NoSuchTableError:
            return None


def _tuples(keys: pa.Table) -> list[tuple[Any, ...]]:
    columns = [column.to_pylist() for column in keys.columns]
    return list(zip(*columns, strict=True))


def _qualified(delta: TableDelta) -> str:
    return f"{delta.schema_name}.{delta.table_name}"
