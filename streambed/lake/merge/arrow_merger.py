"""Carry out a merge plan in this process with pyarrow: a small rewrite is no Spark job.

`ArrowMerger.execute` keeps `SparkMerger.execute`'s contract (`streambed.spark.merger`'s
module docstring): it reads `plan.rewrite` (columns matched by Iceberg field id), removes
the rows of `removed_keys` (by key; for full-row identity tables by the whole row, NULLs
equal, one old row per removed occurrence), adds `rows` with their unchanged (TOAST)
values taken from the old rows (found by `lookup_keys` after a key change; a missing old
row is a STATE error), and writes Parquet sorted by key, in files of at most
`target_file_bytes` and `max_rows_per_file` that cover disjoint key ranges, with field
ids, required columns and microsecond timestamps as the table's Arrow schema says.

The sink (`streambed.lake.sink`) picks it for rewrites of at most `STREAMBED_MERGE_LOCAL_BYTES`
(old files plus new rows): they take milliseconds here against a Spark job's second or
more, and their Arrow form fits in memory. The whole rewrite is held in memory at once.

How rows are found: every identity column is tested with `is_in` against the removed
values (one vectorised pass over the old rows); with more than one identity column, the
rows that pass every test are checked as whole tuples in Python. Those are the removed
rows and the few that share every column value with one, so the Python work is
proportional to the change, not to the files.

Files are written through the lake's pyarrow filesystem (`streambed.lake.storage.resolve`,
local or S3, from the table's FileIO properties) under unique names; a failure deletes
what was written, so nothing is left in the data directory.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from streambed.core.errors import Kind, StreambedError
from streambed.lake.files import Footer, row_group_rows
from streambed.lake.merge.contract import (
    MAX_ROWS_PER_FILE,
    REQUIRED_NULL,
    TARGET_FILE_BYTES,
    check_inputs,
    conform,
    fill_mask,
    merge_failed,
    missing_old_row,
    output_files,
    without_positions,
)
from streambed.lake.merge.plan import MergePlan
from streambed.lake.output import TaskOutput
from streambed.lake.storage import resolve

log = logging.getLogger(__name__)


class ArrowMerger:
    """Executes `MergePlan`s in this process. `properties`: the table's FileIO properties
    (`table.io.properties`; empty for a local warehouse). `footers`: the files the last
    `execute` wrote, with their footers (the commit needs not read them back)."""

    def __init__(
        self,
        properties: Mapping[str, str] | None = None,
        *,
        target_file_bytes: int = TARGET_FILE_BYTES,
        max_rows_per_file: int = MAX_ROWS_PER_FILE,
    ) -> None:
        self.properties = dict(properties or {})
        self.target_file_bytes = target_file_bytes
        self.max_rows_per_file = max_rows_per_file
        self.footers: dict[str, Footer] = {}

    def execute(
        self,
        plan: MergePlan,
        *,
        rows: pa.Table,
        removed_keys: pa.Table,
        unchanged: Mapping[str, pa.BooleanArray],
        key_columns: Sequence[str],
        full_row: bool,
        arrow_schema: pa.Schema,
        output_dir: str,
        lookup_keys: pa.Table | None = None,
        deleted_positions: Mapping[str, pa.Array] | None = None,
    ) -> list[str]:
        """`SparkMerger.execute`, in this process."""
        names = list(arrow_schema.names)
        identity = names if full_row else list(key_columns)
        check_inputs(plan, rows, removed_keys, unchanged, identity, full_row, arrow_schema)
        started = time.monotonic()
        log.info(
            "merge start in process rewrite_files=%d rewrite_rows=%d removed_keys=%d new_rows=%d",
            len(plan.rewrite),
            plan.rewrite_record_count,
            removed_keys.num_rows,
            rows.num_rows,
        )
        self.footers = {}
        work = pa.schema([f.with_nullable(True) for f in arrow_schema])
        old = self._read(plan, work, deleted_positions or {}) if plan.rewrite else None
        merged = _merged(old, rows, removed_keys, unchanged, identity, full_row, work, lookup_keys)
        for f in arrow_schema:
            if not f.nullable and merged.column(f.name).null_count:
                what = f"in-process merge writing to {output_dir} failed"
                raise merge_failed(what, f"streambed: {REQUIRED_NULL} {f.name}")
        merged = merged.cast(arrow_schema)
        if key_columns:
            merged = merged.sort_by([(k, "ascending") for k in key_columns])
        files = self._write(merged, plan, rows, list(key_columns), arrow_schema, output_dir)
        log.info(
            "merge done in process files_written=%d seconds=%.3f",
            len(files),
            time.monotonic() - started,
        )
        return files

    def _read(self, plan: MergePlan, work: pa.Schema, deleted: Mapping[str, pa.Array]) -> pa.Table:
        tables = []
        for f in plan.rewrite:
            try:
                fs, path = resolve(f.path, self.properties)
                table = pq.read_table(path, filesystem=fs)
            except (OSError, pa.ArrowException) as e:
                raise merge_failed(f"in-process merge reading {f.path} failed", str(e)) from e
            table = without_positions(table, deleted.get(f.path))
            tables.append(conform(table, work, by_field_id=True))
        return pa.concat_tables(tables)

    def _write(
        self,
        merged: pa.Table,
        plan: MergePlan,
        rows: pa.Table,
        key_columns: list[str],
        arrow_schema: pa.Schema,
        output_dir: str,
    ) -> list[str]:
        total = merged.num_rows
        if not total:
            return []
        files = max(
            output_files(plan, rows, self.target_file_bytes),
            math.ceil(total / self.max_rows_per_file),
        )
        per_file = math.ceil(total / files)
        group = min(per_file, row_group_rows(merged))
        try:
            fs, base = resolve(output_dir, self.properties)
            output = TaskOutput(
                fs,
                base,
                output_dir,
                uuid.uuid4().hex,
                arrow_schema,
                row_group_rows=group,
                max_rows_per_file=per_file,
                unique=key_columns if len(key_columns) == 1 else (),
            )
        except OSError as e:
            raise merge_failed(f"in-process merge writing to {output_dir} failed", str(e)) from e
        try:
            for offset in range(0, total, group):
                output.write(merged.slice(offset, group))
            written = output.close()
        except BaseException as e:
            output.discard()
            if isinstance(e, OSError):
                what = f"in-process merge writing to {output_dir} failed"
                raise merge_failed(what, str(e)) from e
            raise
        self.footers = {w.uri: Footer(w.footer, w.bytes) for w in written if w.footer is not None}
        return [w.uri for w in written]


def _merged(
    old: pa.Table | None,
    rows: pa.Table,
    removed_keys: pa.Table,
    unchanged: Mapping[str, pa.BooleanArray],
    identity: list[str],
    full_row: bool,
    work: pa.Schema,
    lookup_keys: pa.Table | None,
) -> pa.Table:
    """The old rows without the removed ones, plus the new rows (unchanged values filled),
    in `work` (the table's schema, every column nullable)."""
    parts: list[pa.Table] = []
    removed: pa.ChunkedArray | pa.Array | None = None
    if old is not None and removed_keys.num_rows:
        keys = removed_keys.select(identity).cast(_sub(work, identity))
        removed = removed_mask(old, keys, identity, full_row)
        parts.append(old.filter(pc.invert(removed)))
    elif old is not None:
        parts.append(old)
    new = rows.select(work.names).cast(work)
    needs = fill_mask(rows, unchanged)
    if needs is not None and needs.true_count:
        if old is None or removed is None:
            raise StreambedError(
                f"{needs.true_count} rows have unchanged values but the plan rewrites no "
                "file holding their old rows",
                kind=Kind.STATE,
            )
        source = rows if lookup_keys is None else lookup_keys
        lookup = source.select(identity).cast(_sub(work, identity)).filter(needs)
        masks = {c: pc.fill_null(m, False).filter(needs) for c, m in unchanged.items()}
        parts.append(_filled(new.filter(needs), masks, old.filter(removed), lookup, identity))
        new = new.filter(pc.invert(needs))
    parts.append(new)
    return pa.concat_tables(parts)


def removed_mask(
    old: pa.Table, removed: pa.Table, identity: list[str], full_row: bool
) -> pa.ChunkedArray | pa.Array:
    """A mask over `old`: the rows `removed` takes away (for full-row identity, one per
    removed occurrence)."""
    candidates: pa.ChunkedArray | pa.Array | None = None
    tested = 0
    for column in identity:
        try:
            values = pc.unique(removed.column(column))
            hit = pc.is_in(old.column(column), value_set=values, skip_nulls=not full_row)
        except pa.ArrowNotImplementedError:  # a nested type: the tuple check decides
            continue
        tested += 1
        candidates = hit if candidates is None else pc.and_(candidates, hit)
    if candidates is None:
        candidates = pa.array([True] * old.num_rows, pa.bool_())
    if tested == 1 and len(identity) == 1 and not full_row:
        return candidates  # `is_in` on the whole key is exact
    positions = pc.indices_nonzero(candidates)
    if not len(positions):
        return candidates
    wanted = Counter(_normal(k) for k in _tuples(removed))
    verdicts = []
    for key in _tuples(old.select(identity).take(positions)):
        k = _normal(key)
        hit = wanted[k] > 0 and (full_row or None not in key)
        if hit and full_row:
            wanted[k] -= 1  # each removed occurrence takes one old row
        verdicts.append(hit)
    mask = pc.replace_with_mask(
        _combined(candidates), _combined(candidates), pa.array(verdicts, pa.bool_())
    )
    return mask


def _filled(
    new: pa.Table,
    masks: Mapping[str, pa.Array],
    hits: pa.Table,
    lookup: pa.Table,
    identity: list[str],
) -> pa.Table:
    """`new` with the values its masks mark taken from the old row (in `hits`, the removed
    old rows) whose key is the row's `lookup` key."""
    index: dict[tuple[Any, ...], int] = {}
    for i, key in enumerate(_tuples(hits.select(identity))):
        index.setdefault(_normal(key), i)
    positions = []
    for key in _tuples(lookup):
        found = index.get(_normal(key))
        if found is None:
            raise missing_old_row()
        positions.append(found)
    old_values = hits.take(pa.array(positions, pa.int64()))
    columns = []
    for name in new.schema.names:
        column = _combined(new.column(name))
        if name in masks:
            column = pc.if_else(masks[name], _combined(old_values.column(name)), column)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=new.schema)


def _sub(schema: pa.Schema, names: list[str]) -> pa.Schema:
    return pa.schema([schema.field(n) for n in names])


def _combined(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    return list(zip(*[c.to_pylist() for c in table.columns], strict=True))


_NAN = object()  # NaN equals NaN in a row's identity, as Spark's joins have it


def _normal(value: Any) -> Any:
    """A hashable form of a value in which equal values are equal (NaN included)."""
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    if isinstance(value, list | tuple):
        return tuple(_normal(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _normal(v)) for k, v in value.items())
    return value
