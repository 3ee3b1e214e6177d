"""Where removed keys sit in data files: key-column reads, not whole files.

`find_positions` reads only the key columns of each candidate file (the files whose key
bounds can hold a removed key, `plan_merge`), matched by Iceberg field id so renamed key
columns are found, and returns the row positions of the removed keys, leaving out the rows
a pending delete file already hides (an updated key's old row: its live row is in a newer
file). The work is one vectorised `is_in` per key column over those columns, plus a Python
check of whole tuples only for rows that match every column (`removed_mask`).

`split_plan` then applies the rule of `streambed.lake.merge.write_mode` per file: a plan of the
files to rewrite, and the positions to record in delete files for the others.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from streambed.core.errors import StorageError
from streambed.lake.deletes import deletes_by_data_file, pending_positions
from streambed.lake.merge.arrow_merger import removed_mask
from streambed.lake.merge.contract import FIELD_ID, conform
from streambed.lake.merge.plan import MergePlan
from streambed.lake.merge.write_mode import FileChange, choose
from streambed.lake.storage import resolve
from streambed.lake.tables import arrow_schema, key_columns

logger = logging.getLogger("streambed.merge.positions")


@dataclass(frozen=True)
class Split:
    """A flush's plan split by the write-mode rule."""

    rewrite: MergePlan  # files rewritten (copy-on-write)
    positions: dict[str, pa.Array]  # data path -> positions for a new delete file
    hidden: dict[str, pa.Array] = field(default_factory=dict)  # of `rewrite`'s files


def find_positions(
    paths: Sequence[str],
    keys: pa.Table,
    key_schema: pa.Schema,
    hidden: Mapping[str, pa.Array],
    properties: Mapping[str, str],
) -> dict[str, pa.Array]:
    """data path -> positions (int64, ascending) of `keys`' rows in that file, without the
    positions `hidden` (pending delete files) lists. `key_schema`: the key columns of the
    table's Arrow schema (with field ids); `keys`: one row per removed key."""
    work = pa.schema([f.with_nullable(True) for f in key_schema])
    wanted = keys.select(work.names).cast(work)
    identity = list(work.names)
    out: dict[str, pa.Array] = {}
    for path in paths:
        columns = _key_columns(path, work, properties)
        mask = removed_mask(columns, wanted, identity, full_row=False)
        found = pc.indices_nonzero(mask).cast(pa.int64())
        gone = hidden.get(path)
        if gone is not None and len(gone) and len(found):
            found = found.filter(pc.invert(pc.is_in(found, value_set=gone)))
        out[path] = found
    return out


def _key_columns(path: str, work: pa.Schema, properties: Mapping[str, str]) -> pa.Table:
    """The file's key columns (found by field id) in `work`'s names and types."""
    ids = {f.metadata[FIELD_ID] for f in work}
    try:
        fs, fs_path = resolve(path, dict(properties))
        with fs.open_input_file(fs_path) as handle:
            parquet = pq.ParquetFile(handle)
            names = [
                f.name
                for f in parquet.schema_arrow
                if f.metadata and f.metadata.get(FIELD_ID) in ids
            ]
            table = parquet.read(columns=names)
    except (OSError, pa.ArrowInvalid) as e:
        raise StorageError(f"cannot read the key columns of {path}: {e}") from e
    return conform(table, work, by_field_id=True)


def split_plan(
    plan: MergePlan,
    found: Mapping[str, pa.Array],
    hidden: Mapping[str, pa.Array],
    rewrite_share: float,
) -> Split:
    """`plan`'s files split by `write_mode.choose`: `found` are the positions of removed
    keys per file (`find_positions`), `hidden` those pending delete files hide."""
    changes = [
        FileChange(
            path=f.path,
            record_count=f.record_count,
            removed=len(found.get(f.path, ())),
            hidden=len(hidden.get(f.path, ())),
        )
        for f in plan.rewrite
    ]
    choice = choose(changes, rewrite_share)
    rewrite = tuple(f for f in plan.rewrite if f.path in set(choice.rewrite))
    return Split(
        rewrite=MergePlan(
            rewrite=rewrite,
            drop=plan.drop,
            keep=plan.keep + len(plan.rewrite) - len(rewrite),
            truncated=plan.truncated,
            removed_key_count=plan.removed_key_count,
        ),
        positions={p: found[p] for p in choice.delete},
        hidden={f.path: hidden[f.path] for f in rewrite if f.path in hidden},
    )


def plan_flush(
    table: Table,
    plan: MergePlan,
    keys: pa.Table,
    deletes: Iterable[DataFile],
    *,
    merge_on_read: bool,
    rewrite_share: float,
) -> Split:
    """`plan` with the pending deletes of its files (`deletes`: the table's live delete
    files), split by the write-mode rule when `merge_on_read` (else every file of `plan` is
    rewritten, as copy-on-write)."""
    paths = [f.path for f in plan.rewrite]
    hidden = pending_positions(table, deletes_by_data_file(deletes, paths))
    if not merge_on_read:
        return Split(plan, {}, {p: hidden[p] for p in paths if p in hidden})
    schema = arrow_schema(table)
    key_schema = pa.schema([schema.field(n) for n in key_columns(table)])
    found = find_positions(paths, keys, key_schema, hidden, table.io.properties)
    split = split_plan(plan, found, hidden, rewrite_share)
    rewritten = len(split.rewrite.rewrite)
    logger.debug(
        "write mode for %s: rewrite %d files, delete files for %d, %d hold no removed key",
        ".".join(table.name()),
        rewritten,
        len(split.positions),
        len(paths) - rewritten - len(split.positions),
    )
    return split
