"""What every merger of a `MergePlan` shares: input checks, output sizing, error kinds.

Both mergers (`streambed.spark.merger.SparkMerger`, `streambed.lake.merge.arrow_merger.
ArrowMerger`) keep the contract written in the executor's module docstring; the pure
pieces of it live here so that they cannot drift apart. Nothing here imports pyspark.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from streambed.core.errors import Kind, StorageError, StreambedError
from streambed.lake.merge.plan import MergePlan
from streambed.lake.storage import refused_error

FIELD_ID: Final = b"PARQUET:field_id"
MISSING_OLD_ROW: Final = "streambed: no old row to take unchanged values from"
REQUIRED_NULL: Final = "NULL in required column"
MiB: Final = 1024 * 1024
TARGET_FILE_BYTES: Final = 128 * MiB
MAX_ROWS_PER_FILE: Final = 2_000_000


class Merger(Protocol):
    """Carries out a plan: `SparkMerger.execute`'s contract."""

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
    ) -> list[str]: ...


def without_positions(table: pa.Table, positions: pa.Array | None, offset: int = 0) -> pa.Table:
    """`table` (rows `offset`.. of a data file) without the rows at file `positions` (a
    position-delete file's, still pending against the file: they are not rows any more)."""
    if positions is None or not len(positions) or not table.num_rows:
        return table
    rows = pa.array(range(offset, offset + table.num_rows), pa.int64())
    return table.filter(pc.invert(pc.is_in(rows, value_set=positions.cast(pa.int64()))))


def check_inputs(
    plan: MergePlan,
    rows: pa.Table,
    removed_keys: pa.Table,
    unchanged: Mapping[str, pa.BooleanArray],
    identity: list[str],
    full_row: bool,
    arrow_schema: pa.Schema,
) -> None:
    """ValueError for arguments no merger can carry out (a caller's bug, not bad data)."""
    names = set(arrow_schema.names)
    if plan.rewrite and removed_keys.num_rows and not identity:
        raise ValueError("removing rows needs key_columns, or full_row=True")
    if missing := [c for c in identity if c not in names]:
        raise ValueError(f"key columns {missing} are not in the table schema")
    if missing := [c for c in arrow_schema.names if c not in rows.schema.names]:
        raise ValueError(f"rows lack columns {missing}")
    if missing := [c for c in identity if c not in removed_keys.schema.names]:
        raise ValueError(f"removed_keys lack columns {missing}")
    for column, mask in unchanged.items():
        if column not in names:
            raise ValueError(f"unchanged mask for unknown column {column!r}")
        if len(mask) != rows.num_rows:
            raise ValueError(
                f"unchanged mask for {column!r} has {len(mask)} values, rows have {rows.num_rows}"
            )
        if column in identity and pc.any(mask).as_py():
            raise ValueError(f"key column {column!r} cannot be unchanged")
    if full_row and any(pc.any(m).as_py() for m in unchanged.values()):
        raise ValueError(
            "full-row identity tables have no key to find old rows by: fill unchanged values "
            "from the old row in the delta before merging"
        )


def fill_mask(rows: pa.Table, unchanged: Mapping[str, pa.BooleanArray]) -> pa.BooleanArray | None:
    """True for the rows with at least one unchanged value; None without masks."""
    masks = [pc.fill_null(m, False) for m in unchanged.values()]
    if not masks:
        return None
    result: pa.BooleanArray = functools.reduce(pc.or_, masks)
    return result


def output_files(plan: MergePlan, rows: pa.Table, target_file_bytes: int) -> int:
    """How many files of about `target_file_bytes` the merge's output takes."""
    estimate = plan.rewrite_size_bytes + int(rows.nbytes) // 4
    return max(1, math.ceil(estimate / target_file_bytes))


def rows_per_file(
    plan: MergePlan, target_file_bytes: int, max_rows_per_file: int, slack: float = 1.0
) -> int:
    """Rows of about `slack` x `target_file_bytes` on storage, as the rewritten files hold
    them; at most `max_rows_per_file`."""
    if not plan.rewrite_record_count:
        return max_rows_per_file
    per_row = max(1.0, plan.rewrite_size_bytes / plan.rewrite_record_count)
    return max(1, min(max_rows_per_file, int(slack * target_file_bytes / per_row)))


def local_path(uri: str) -> str:
    return uri.removeprefix("file://")  # not percent-encoded (streambed.lake.locations)


def missing_old_row() -> StreambedError:
    return StreambedError(
        "a row with unchanged (TOAST) values has no old row in the lake to take them "
        "from; the table copy is inconsistent: resync the table",
        kind=Kind.STATE,
    )


def merge_failed(what: str, text: str) -> StreambedError:
    """A failed merge's error from its text: STATE for a missing old row, INTERNAL for a
    NULL in a required column, STORAGE_AUTH when the store refused, else STORAGE."""
    if MISSING_OLD_ROW in text:
        return missing_old_row()
    if REQUIRED_NULL in text:
        return StreambedError(
            f"merge produced a NULL in a required column: {text.splitlines()[0][:300]}",
            kind=Kind.INTERNAL,
        )
    first_line = text.splitlines()[0][:500] if text else "unknown error"
    refused = refused_error(what, text)
    if refused is not None:  # an OSError from the object store, in the error's text
        return refused
    return StorageError(f"{what}: {first_line}")


def conform(table: pa.Table, schema: pa.Schema, *, by_field_id: bool) -> pa.Table:
    """`table` cast to `schema`, columns matched by Iceberg field id or by name.

    A column of `schema` that `table` lacks (added to the table after the file was
    written) reads as NULL. A NULL in a required column is an error, never written.
    """
    index: dict[Any, int] = {}
    for i, field in enumerate(table.schema):
        if not by_field_id:
            index[field.name] = i
        elif field.metadata and FIELD_ID in field.metadata:
            index[field.metadata[FIELD_ID]] = i
    columns = []
    for field in schema:
        if by_field_id:
            position = index.get(field.metadata.get(FIELD_ID) if field.metadata else None)
        else:
            position = index.get(field.name)
        if position is None:
            column = pa.nulls(table.num_rows, field.type)
        else:
            column = table.column(position).cast(field.type)
        if not field.nullable and column.null_count:
            raise ValueError(f"column {field.name!r} is required but has {column.null_count} NULLs")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)
