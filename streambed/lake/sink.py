"""Apply one table's delta to the lake: convert, plan, write, commit.

A delta of new keys only is an append: Parquet is written straight from Arrow. Anything
that removes rows is planned with `plan_merge` (only files whose key bounds can hold a
removed key are touched) and, when files must be rewritten, carried out in this process
(`ArrowMerger`) when the rewrite is at most `merge_local_bytes` (the files' stored bytes
plus the new rows' Arrow bytes, STREAMBED_MERGE_LOCAL_BYTES), else on Spark, which is
started only for the first such merge. With merge-on-read (`write_mode`), files that lose
under `rewrite_share` of their rows are not rewritten: their removed rows go to position-delete
files (`streambed.lake.merge.positions`, `streambed.lake.deletes`) and the new rows are appended.
The Iceberg commit records the delta's commit LSN as the table's frontier.

Before the first delta of a new table layout, the lake table is made to match it:
created, re-created when the source table was dropped and created again under the same
name (another relation id), or evolved (`streambed.lake.evolve`). Domain columns are
stored as their base type. When the lake cannot follow a change by itself (a column added
with a volatile default: `ResyncNeeded`), the sink asks for the table to be copied again
(`resync`) and leaves its lake table's rows as they are until the copy replaces it: the
delta is not written (the copy's snapshot holds it), only its position is committed.
Without `resync` the error stops the process.

The lake's files are read and written through pyarrow's filesystems and pyiceberg's FileIO,
which raise OSError when the object store fails; the sink raises it as `StorageError`
(retried, see `streambed.pipeline`; one that refuses the credentials or the access stops
the process, `storage.storage_error`). After a failure `reset` forgets what the sink cached:
a commit whose answer was lost may have landed, so tables are loaded again.

Parts of a large transaction (`TableDelta.final` False, from `stage`) are written but not
committed: the sink keeps, per table, the lake files they replaced and the files they
wrote, plans later parts against that pending view, and commits everything in one
snapshot with the table's final delta.

After its commits the sink expires the snapshots a table no longer needs to keep
(`retention`, see `streambed.lake.expire`).

An `observer` (optional; `streambed.metrics.replication`) hears how long each table's write
and commit took and each table's size and frontier, whenever the sink opens or commits it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from streambed.buffer.changes import TableDelta, TableKey
from streambed.core.errors import Kind, StreambedError
from streambed.core.failpoints import failpoint
from streambed.core.log import log
from streambed.lake.commit import commit, data_file, frontier
from streambed.lake.convert import key_indexes, keys_to_arrow, rows_to_arrow
from streambed.lake.declared import record_facts
from streambed.lake.deletes import LiveFiles, current_files, write_position_deletes
from streambed.lake.evolve import OnIncompatible, ResyncNeeded, evolve_table
from streambed.lake.expire import MIN_INTERVAL_S, Retention, expire
from streambed.lake.files import FileInfo, Footer, file_info, write_parquet_files
from streambed.lake.merge.arrow_merger import ArrowMerger
from streambed.lake.merge.contract import Merger, fill_mask
from streambed.lake.merge.local import merges_here
from streambed.lake.merge.plan import MergePlan, plan_merge
from streambed.lake.merge.positions import plan_flush
from streambed.lake.merge.write_mode import REWRITE_SHARE, WriteMode
from streambed.lake.source_catalog import SourceCatalog
from streambed.lake.storage import resolve, storage_error
from streambed.lake.tables import PROP_RELATION_ID, arrow_schema, ensure_table, key_columns
from streambed.lake.types import with_base_types
from streambed.pgoutput.messages import Relation, TupleValue

logger = logging.getLogger("streambed.sink")


@dataclass(frozen=True)
class TableStats:
    """A lake table's size and frontier at its current snapshot."""

    schema: str
    name: str
    rows: int
    files: int
    bytes: int
    frontier_lsn: int | None

    @classmethod
    def of(cls, name: tuple[str, str], table: Table) -> TableStats:
        snapshot = table.current_snapshot()
        summary = snapshot.summary if snapshot is not None else None

        def total(key: str) -> int:
            value = summary.get(key) if summary is not None else None
            return int(value) if value is not None else 0

        return cls(
            name[0],
            name[1],
            # position deletes hide rows of the data files (each row once: a flush never
            # deletes a position already hidden, `streambed.lake.merge.positions`)
            rows=total("total-records") - total("total-position-deletes"),
            files=total("total-data-files"),
            bytes=total("total-files-size"),
            frontier_lsn=frontier(table),
        )


class LakeObserver(Protocol):
    """What the sink reports (`streambed.metrics.replication.ReplicationMetrics`)."""

    def table(self, stats: TableStats) -> None: ...
    def forget(self, schema: str, name: str) -> None: ...
    def written(self, mode: str, seconds: float) -> None: ...
    def committed(self, seconds: float) -> None: ...


@dataclass
class _Pending:
    """Files of a large transaction's parts, not committed yet."""

    removed: set[str] = field(default_factory=set)  # committed lake files replaced
    added: list[str] = field(default_factory=list)  # files the parts wrote, still live
    infos: dict[str, FileInfo] = field(default_factory=dict)
    footers: dict[str, Footer] = field(default_factory=dict)  # of `added`, where returned


class IcebergSink:
    """The lake side of the pipeline. `merger` (Spark's) is created on first need (Spark
    starts slowly); rewrites of at most `merge_local_bytes` are merged in this process.

    `write_mode`, `rewrite_share`: STREAMBED_WRITE_MODE and STREAMBED_REWRITE_SHARE
    (`streambed.lake.merge.write_mode`): whether a file with removed rows is rewritten or gets
    a position-delete file. `source` (optional) reads the source catalog: domain base
    types, column attnums (so renames stay renames) and fast defaults of added columns.
    `on_incompatible` is STREAMBED_ON_INCOMPATIBLE_SCHEMA. `resync(schema, name)`
    (optional) asks for a table to be copied again (`StateStore.request_resync`, taken
    up by the copy manager).
    """

    def __init__(
        self,
        catalog: Catalog,
        merger: Callable[[], Merger],
        source: SourceCatalog | None = None,
        on_incompatible: OnIncompatible = "stop",
        resync: Callable[[str, str], None] | None = None,
        retention: Retention | None = None,
        merge_local_bytes: int = 0,
        write_mode: WriteMode = "merge-on-read",
        rewrite_share: float = REWRITE_SHARE,
        observer: LakeObserver | None = None,
    ) -> None:
        self.catalog = catalog
        self.observer = observer
        self.merge_local_bytes = merge_local_bytes
        self.write_mode = write_mode
        self.rewrite_share = rewrite_share
        self.resync = resync
        self.source = source
        self.on_incompatible = on_incompatible
        self._merger_factory = merger
        self._merger: Merger | None = None
        self._tables: dict[tuple[str, str], Table] = {}
        self._layouts: dict[tuple[str, str], tuple[Relation, TableKey]] = {}
        self._resolved: dict[Relation, Relation] = {}
        self._pending: dict[tuple[str, str], _Pending] = {}
        self.retention = retention
        self._expired_at: dict[tuple[str, str], float] = {}
        self._last_write: tuple[str, int] = ("append", 0)  # how `_write` wrote (debug log)

    def load(self, names: Iterable[tuple[str, str]]) -> None:
        """Open existing lake tables, so watermarks list them before their first change."""
        for name in names:
            with _storage(f"loading {name[0]}.{name[1]}"):
                table = self._existing(name)
            if table is not None:
                self._tables[name] = table
                if self.observer is not None:
                    self.observer.table(TableStats.of(name, table))

    def unload(self, name: tuple[str, str]) -> None:
        """Stop listing a lake table (its files stay): the next watermark leaves it out, so
        the query server stops serving it (a table streambed no longer streams)."""
        self._tables.pop(name, None)
        self._layouts.pop(name, None)
        if self.observer is not None:
            self.observer.forget(*name)

    def reset(self) -> None:
        """Forget every cached table, layout and uncommitted part, as at start (after a
        storage failure: the pipeline reads again from the slot). Files of uncommitted parts
        stay for `streambed sweep`."""
        self._tables.clear()
        self._layouts.clear()
        self._resolved.clear()
        self._pending.clear()
        self._merger = None  # Spark's JVM may have ended: the next merge gets the live one

    def frontier(self, schema: str, name: str) -> int | None:
        with _storage(f"reading the frontier of {schema}.{name}"):
            table = self._tables.get((schema, name)) or self._existing((schema, name))
        return None if table is None else frontier(table)

    def metadata_locations(self) -> Mapping[tuple[str, str], str]:
        return {name: table.metadata_location for name, table in self._tables.items()}

    def stage(self, delta: TableDelta) -> None:
        """Write a part of a large transaction without committing it (`TableDelta.final`)."""
        with _storage(f"writing part of {_qualified(delta)}"):
            self._stage(delta)

    def _stage(self, delta: TableDelta) -> None:
        relation = self._resolve(delta.relation)
        name = (relation.namespace, relation.name)
        table = self._table_or_resync(relation, delta.key)
        if table is None:
            return
        pending = self._pending.setdefault(name, _Pending())
        removed, added, footers, _ = self._write(table, relation, delta, pending)
        self._settle(table, pending, removed, added, footers)
        logger.debug("staged part of %s: %d files pending", _qualified(delta), len(pending.added))

    def apply(self, delta: TableDelta) -> str:
        """Write and commit the delta; the table's new metadata location."""
        with _storage(f"applying changes to {_qualified(delta)}"):
            return self._apply(delta)

    def _apply(self, delta: TableDelta) -> str:
        relation = self._resolve(delta.relation)
        name = (relation.namespace, relation.name)
        table = self._table_or_resync(relation, delta.key)
        if table is None:
            # Nothing of the delta is written: the copy's snapshot holds it. The commit only
            # records its position, so the frontier the pipeline stores next is also the
            # lake's (a restart before the copy would otherwise find the state store ahead
            # of the lake); the copy then replaces the table.
            self._pending.pop(name, None)
            current = self._existing(name)
            assert current is not None  # ResyncNeeded is raised only for a table with rows
            return commit(current, removed=[], added=[], lsn=delta.commit_lsn)
        pending = self._pending.pop(name, None)
        started = time.monotonic()
        removed, added, footers, deletes = self._write(table, relation, delta, pending)
        written = time.monotonic()
        if pending is not None:
            self._settle(table, pending, removed, added, footers)
            removed, added, footers = sorted(pending.removed), list(pending.added), pending.footers
        failpoint("after_parquet_write")
        if deletes:
            failpoint("after_delete_files_write")
        location = commit(
            table,
            removed=removed,
            added=added,
            lsn=delta.commit_lsn,
            footers=footers,
            deletes=deletes,
        )
        failpoint("after_table_commit")
        committed = time.monotonic()
        if self.observer is not None:
            self.observer.written(self._last_write[0], written - started)
            self.observer.committed(committed - written)
            self.observer.table(TableStats.of(name, table))
        self._expire(name, table)
        if logger.isEnabledFor(logging.DEBUG):
            mode, rewrite_bytes = self._last_write
            log(
                logger,
                "applied",
                logging.DEBUG,
                table=_qualified(delta),
                changes=len(delta.rows) + len(delta.removed_keys),
                mode=mode,
                rewrite_bytes=rewrite_bytes,
                write_seconds=f"{written - started:.3f}",
                commit_seconds=f"{committed - written:.3f}",
                expire_seconds=f"{time.monotonic() - committed:.3f}",
            )
        return location

    def _expire(self, name: tuple[str, str], table: Table) -> None:
        """Expire the table's old snapshots (`streambed.lake.expire`): at most once a minute,
        or at once when a batch of them is due."""
        if self.retention is None:
            return
        now = time.monotonic()
        recent = now - self._expired_at.get(name, -MIN_INTERVAL_S) < MIN_INTERVAL_S
        few = len(table.metadata.snapshots) < self.retention.max_snapshots + self.retention.batch
        if recent and few:
            return
        self._expired_at[name] = now
        expire(table, self.retention)

    @property
    def merger(self) -> Merger:
        """Spark's merger, created on first use."""
        if self._merger is None:
            self._merger = self._merger_factory()
        return self._merger

    def _merger_for(self, plan: MergePlan, rows: pa.Table, table: Table) -> Merger:
        """In this process when the rewrite is small enough (`merges_here`), else Spark's."""
        if merges_here(
            plan.rewrite_size_bytes, plan.rewrite_record_count, rows, self.merge_local_bytes
        ):
            return ArrowMerger(table.io.properties)
        return self.merger

    # ---- writing ----------------------------------------------------------------------

    def _write(
        self, table: Table, relation: Relation, delta: TableDelta, pending: _Pending | None
    ) -> tuple[list[str], list[str], dict[str, Footer], list[DataFile]]:
        """Write the delta's files; returns (files it replaces, files it wrote, the footers
        of those written here: a merge's are read back at the commit, the position-delete
        files it wrote).

        Merge-on-read (`write_mode`) applies to a final delta (not a part of a large
        transaction, whose parts are planned against one another's uncommitted files) of
        a table with a key whose rows carry every value (an unchanged TOAST value must be
        taken from the old row, which only a rewrite reads); otherwise the files are
        rewritten, with the rows their pending delete files hide left out."""
        schema = arrow_schema(table)
        converted = rows_to_arrow(relation, delta.rows, schema)
        if delta.append_only:
            if converted.unchanged:
                raise StreambedError(
                    f"{_qualified(delta)}: an unchanged TOAST value arrived for a new row",
                    kind=Kind.INTERNAL,
                )
            footers = write_parquet_files(table, converted.table)
            self._last_write = ("append", 0)
            return [], list(footers), footers, []
        keys = keys_to_arrow(relation, delta.key, delta.removed_keys, schema)
        live = current_files(table)
        plan = plan_merge(
            self._files(table, live, pending), _tuples(keys), truncated=delta.truncated
        )
        logger.debug("merge plan for %s: %s", _qualified(delta), plan.describe())
        deletes: list[DataFile] = []
        hidden: dict[str, pa.Array] = {}
        if plan.rewrite:
            on_read = (
                self.write_mode == "merge-on-read"
                and pending is None
                and delta.final
                and not delta.key.full_row
                and bool(key_columns(table))
                and not _fills(converted.unchanged, converted.table)
            )
            split = plan_flush(
                table,
                plan,
                keys,
                live.deletes.values(),
                merge_on_read=on_read,
                rewrite_share=self.rewrite_share,
            )
            deletes = write_position_deletes(table, split.positions)
            plan, hidden = split.rewrite, split.hidden
        removed = [f.path for f in (*plan.rewrite, *plan.drop)]
        if plan.rewrite:
            merger = self._merger_for(plan, converted.table, table)
            mode = "local" if isinstance(merger, ArrowMerger) else "spark"
            self._last_write = (mode, plan.rewrite_size_bytes)
            added = merger.execute(
                plan,
                rows=converted.table,
                removed_keys=keys,
                unchanged=converted.unchanged,
                key_columns=key_columns(table),
                full_row=delta.key.full_row,
                arrow_schema=schema,
                output_dir=f"{table.location()}/data",
                lookup_keys=_lookup_keys(relation, delta, schema) if delta.moved else None,
                deleted_positions=hidden,
            )
            if isinstance(merger, ArrowMerger):
                return removed, added, merger.footers, deletes
        elif _fills(converted.unchanged, converted.table) and not delta.truncated:
            raise StreambedError(
                f"{_qualified(delta)}: an update left a large value unchanged, but the "
                "row it belongs to is not in the lake; the lake is missing rows: "
                "resync this table",
                kind=Kind.STATE,
            )
        else:
            footers = write_parquet_files(table, converted.table)
            self._last_write = ("delete-files" if deletes else "append", 0)
            return removed, list(footers), footers, deletes
        return removed, added, {}, deletes

    def _files(self, table: Table, live: LiveFiles, pending: _Pending | None) -> list[FileInfo]:
        files = [file_info(table, f) for f in live.data.values()]
        if pending is None:
            return files
        kept = [f for f in files if f.path not in pending.removed]
        return kept + [pending.infos[p] for p in pending.added]

    def _settle(
        self,
        table: Table,
        pending: _Pending,
        removed: Sequence[str],
        added: Sequence[str],
        footers: Mapping[str, Footer],
    ) -> None:
        """Record a written part: lake files it replaced, part files it superseded."""
        for path in removed:
            if path in pending.infos:
                pending.added.remove(path)
                del pending.infos[path]
                pending.footers.pop(path, None)
                _delete_quietly(path, table.io.properties)  # never committed: nobody reads it
            else:
                pending.removed.add(path)
        for path in added:
            pending.added.append(path)
            footer = footers.get(path)
            if footer is not None:
                pending.footers[path] = footer
            pending.infos[path] = file_info(
                table, data_file(table.io, table.metadata, path, footer)
            )

    # ---- table layout -------------------------------------------------------------------

    def _resolve(self, relation: Relation) -> Relation:
        """The relation with domains replaced by their base types."""
        resolved = self._resolved.get(relation)
        if resolved is None:
            resolved = relation
            if self.source is not None:
                bases = self.source.base_types([c.type_oid for c in relation.columns])
                resolved = with_base_types(relation, bases)
            if len(self._resolved) > 1000:
                self._resolved.clear()
            self._resolved[relation] = resolved
        return resolved

    def _table_or_resync(self, relation: Relation, key: TableKey) -> Table | None:
        """`_table`, or None when the table must be copied again and a resync was asked."""
        try:
            return self._table(relation, key)
        except ResyncNeeded as e:
            if self.resync is None:
                raise
            logger.warning(
                "table must be copied again, resync requested table=%s.%s reason=%s", *e.table, e
            )
            self.resync(*e.table)
            return None

    def _table(self, relation: Relation, key: TableKey) -> Table:
        name = (relation.namespace, relation.name)
        if self._layouts.get(name) == (relation, key) and name in self._tables:
            return self._tables[name]
        table = self._existing(name)
        if table is not None:
            known = table.properties.get(PROP_RELATION_ID)
            if known is not None and known != str(relation.relation_id):
                logger.info(
                    "source table re-created, starting its lake table fresh table=%s.%s "
                    "old_relation_id=%s relation_id=%d",
                    *name,
                    known,
                    relation.relation_id,
                )
                self.catalog.drop_table(name)
                self._pending.pop(name, None)
                table = None
        if table is None:
            table = ensure_table(self.catalog, relation, key)
            if self.source is not None:
                names = [c.name for c in relation.columns]
                table = evolve_table(
                    table,
                    relation,
                    key,
                    self.source.columns(relation.relation_id, names),
                    self.on_incompatible,
                )
        else:
            if name in self._pending:
                raise StreambedError(
                    f"{name[0]}.{name[1]} changed layout between parts of one transaction",
                    kind=Kind.INTERNAL,
                )
            columns = None
            if self.source is not None:
                lake_names = {f.name for f in table.schema().fields}
                columns = self.source.columns(relation.relation_id, lake_names)
            table = evolve_table(table, relation, key, columns, self.on_incompatible)
        if self.source is not None:
            names = [f.name for f in table.schema().fields]
            table = record_facts(table, self.source.facts(relation.relation_id, names))
        self._tables[name] = table
        self._layouts[name] = (relation, key)
        return table

    def _existing(self, name: tuple[str, str]) -> Table | None:
        try:
            return self.catalog.load_table(name)
        except NoSuchTableError:
            return None


@contextlib.contextmanager
def _storage(what: str) -> Iterator[None]:
    """OSError from the lake's storage as `StorageError` (`storage.storage_error`)."""
    try:
        yield
    except OSError as e:
        failed = storage_error(e, what)
        if failed is None:
            raise
        raise failed from e


def _fills(unchanged: Mapping[str, pa.BooleanArray], rows: pa.Table) -> bool:
    """Whether some row has an unchanged (TOAST) value to take from its old row."""
    needs = fill_mask(rows, unchanged)
    return needs is not None and needs.true_count > 0


def _lookup_keys(relation: Relation, delta: TableDelta, schema: pa.Schema) -> pa.Table:
    """Per row of the delta: the key of the lake row its unchanged values come from."""
    moved = dict(delta.moved)
    indexes = key_indexes(relation, delta.key)
    keys: list[tuple[TupleValue, ...]] = []
    for row in delta.rows:
        own = tuple(row[i] for i in indexes)
        keys.append(moved.get(own, own))
    return keys_to_arrow(relation, delta.key, keys, schema)


def _delete_quietly(path: str, properties: dict[str, str]) -> None:
    with contextlib.suppress(OSError):
        fs, fs_path = resolve(path, properties)
        fs.delete_file(fs_path)


def _tuples(keys: pa.Table) -> list[tuple[Any, ...]]:
    columns = [column.to_pylist() for column in keys.columns]
    return list(zip(*columns, strict=True))


def _qualified(delta: TableDelta) -> str:
    return f"{delta.schema_name}.{delta.table_name}"
