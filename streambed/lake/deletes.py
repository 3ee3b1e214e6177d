"""Iceberg v2 position-delete files: writing them, listing them, reading their positions.

A position-delete file is Parquet with two columns, `file_path` (field id 2147483546) and
`pos` (field id 2147483545): each row hides the row at `pos` (0-based) of the data file at
`file_path`. streambed writes one delete file per data file and flush (merge-on-read,
`streambed.lake.merge.write_mode`), sorted by position, and records the data file's path as both
lower and upper bound of `file_path`, so a reader (and `referenced`) knows from the
manifest alone which data file it applies to. Delete files written by another engine may
cover several data files; their positions are read and filtered by path.

A delete file lives as long as the data file it references: when a flush, a schema change
or a copy removes that data file (its rows rewritten with the deletes applied), the commit
removes the delete file too (`streambed.lake.commit`). Equality deletes are not applied
here: a table that has them is refused (`current_files`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table

from streambed.core.errors import Kind, StorageError, StreambedError
from streambed.lake.storage import resolve

FILE_PATH_ID: Final = 2147483546
POS_ID: Final = 2147483545

DELETE_SCHEMA: Final = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(POS_ID)}),
    ]
)


@dataclass(frozen=True)
class LiveFiles:
    """The current snapshot's live files: data files and position-delete files by path."""

    data: dict[str, DataFile]
    deletes: dict[str, DataFile]


def current_files(table: Table) -> LiveFiles:
    """The live data and position-delete files of the table's current snapshot.

    Raises COMMIT_CONFLICT when the table has equality-delete files (another engine's):
    streambed cannot find the rows they hide without reading every file."""
    snapshot = table.current_snapshot()
    data: dict[str, DataFile] = {}
    deletes: dict[str, DataFile] = {}
    if snapshot is None:
        return LiveFiles(data, deletes)
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            if f.content == DataFileContent.DATA:
                data[f.file_path] = f
            elif f.content == DataFileContent.POSITION_DELETES:
                deletes[f.file_path] = f
            else:
                raise StreambedError(
                    f"{'.'.join(table.name())}: the table has equality-delete files "
                    f"({f.file_path}), written by another engine; streambed applies only "
                    "position deletes. Rewrite the table's data files (compaction) with that "
                    "engine first",
                    kind=Kind.COMMIT_CONFLICT,
                )
    return LiveFiles(data, deletes)


def referenced(delete_file: DataFile) -> str | None:
    """The one data file a delete file applies to, from its `file_path` bounds; None when
    the bounds do not name exactly one (it may then apply to any)."""
    lower = (delete_file.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(FILE_PATH_ID)
    if lower is None or lower != upper:
        return None
    return lower.decode()


def deletes_by_data_file(
    deletes: Iterable[DataFile], data_paths: Iterable[str]
) -> dict[str, list[DataFile]]:
    """data path -> the delete files that may hold positions of it (only for `data_paths`)."""
    wanted = set(data_paths)
    out: dict[str, list[DataFile]] = {}
    for d in deletes:
        target = referenced(d)
        targets = wanted if target is None else ({target} & wanted)
        for path in targets:
            out.setdefault(path, []).append(d)
    return out


def orphaned(deletes: Mapping[str, DataFile], live_data: Iterable[str]) -> list[DataFile]:
    """The delete files that reference only data files not in `live_data` (after a commit
    removed them): they must leave the snapshot with their data files."""
    live = set(live_data)
    return [d for d in deletes.values() if (r := referenced(d)) is not None and r not in live]


def pending_positions(table: Table, deletes: Mapping[str, list[DataFile]]) -> dict[str, pa.Array]:
    """data path -> sorted unique positions its live delete files hide (int64)."""
    out: dict[str, pa.Array] = {}
    for data_path, files in deletes.items():
        parts = []
        for d in files:
            if referenced(d) == data_path:
                parts.append(_positions(table, d.file_path))
                continue
            rows = _read(table, d.file_path)
            rows = rows.filter(pc.equal(rows.column("file_path"), data_path))
            parts.append(rows.column("pos").combine_chunks().cast(pa.int64()))
        if parts:
            out[data_path] = pc.unique(pa.concat_arrays(parts)).sort()
    return out


def write_position_deletes(table: Table, positions: Mapping[str, pa.Array]) -> list[DataFile]:
    """One delete file per data file of `positions` (data path -> row positions to hide);
    their DataFiles (content POSITION_DELETES), for the commit. Files already written are
    removed when a later one fails."""
    written: list[DataFile] = []
    try:
        for data_path, pos in positions.items():
            if len(pos):
                written.append(_write_one(table, data_path, pos))
    except OSError as e:
        for d in written:
            remove_quietly(d.file_path, table.io.properties)
        raise StorageError(f"{'.'.join(table.name())}: cannot write a delete file: {e}") from e
    return written


def _write_one(table: Table, data_path: str, positions: pa.Array) -> DataFile:
    pos = pc.unique(positions.cast(pa.int64())).sort()
    rows = pa.table([pa.array([data_path] * len(pos), pa.string()), pos], schema=DELETE_SCHEMA)
    path = table.location_provider().new_data_location(f"{uuid.uuid4()}-deletes.parquet")
    fs, fs_path = resolve(path, table.io.properties)
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(fs_path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(fs_path) as sink:
        pq.write_table(rows, sink, compression="zstd")
        size = sink.tell()
    encoded_path = data_path.encode()
    low, high = pos[0].as_py(), pos[-1].as_py()
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=_unpartitioned(),
        record_count=len(pos),
        file_size_in_bytes=size,
        column_sizes={},
        value_counts={FILE_PATH_ID: len(pos), POS_ID: len(pos)},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        nan_value_counts={},
        lower_bounds={FILE_PATH_ID: encoded_path, POS_ID: low.to_bytes(8, "little", signed=True)},
        upper_bounds={FILE_PATH_ID: encoded_path, POS_ID: high.to_bytes(8, "little", signed=True)},
        split_offsets=None,
        equality_ids=None,
        sort_order_id=None,
        key_metadata=None,
    )


def _unpartitioned() -> object:
    from pyiceberg.typedef import Record

    return Record()


_CACHED: dict[str, pa.Array] = {}
CACHED_POSITIONS: Final = 4_000_000  # positions kept in memory (32 MB) across flushes


def _positions(table: Table, path: str) -> pa.Array:
    """The positions of a delete file that names one data file. Files never change once
    written, so they are kept (up to `CACHED_POSITIONS`) for the next flushes: a file
    collecting deletes over many flushes is not read again each time."""
    found = _CACHED.get(path)
    if found is None:
        found = _read(table, path).column("pos").combine_chunks().cast(pa.int64())
        if sum(len(v) for v in _CACHED.values()) + len(found) > CACHED_POSITIONS:
            _CACHED.clear()
        _CACHED[path] = found
    return found


def _read(table: Table, path: str) -> pa.Table:
    fs, fs_path = resolve(path, table.io.properties)
    try:
        return pq.read_table(fs_path, filesystem=fs, columns=["file_path", "pos"])
    except (OSError, pa.ArrowInvalid) as e:
        raise StorageError(f"cannot read the delete file {path}: {e}") from e


def remove_quietly(path: str, properties: Mapping[str, str]) -> None:
    try:
        fs, fs_path = resolve(path, dict(properties))
        fs.delete_file(fs_path)
    except OSError:
        pass  # an orphan; `streambed sweep` removes it
