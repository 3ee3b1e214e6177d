"""Parquet data files of a lake table: writing new ones, listing the current ones.

Files are written sorted by key, so each file's per-key-column lower/upper bounds (kept
in the Iceberg manifests) are tight and a merge can pick only the files that may hold a
changed key. Written files are not part of the table until `streambed.lake.commit`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.types import (
    DateType,
    IcebergType,
    PrimitiveType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from streambed.core.errors import Kind, StorageError, StreambedError
from streambed.lake.storage import resolve
from streambed.lake.tables import arrow_schema, key_columns

TARGET_FILE_BYTES: Final = 128 * 1024 * 1024
"""Close a data file once it reaches this size on storage (it may exceed it by one row group)."""

ROW_GROUP_MEMORY_BYTES: Final = 64 * 1024 * 1024
"""Rows per row group are chosen so one group takes about this much Arrow memory."""

MAX_ROW_GROUP_ROWS: Final = 1_000_000
MIN_ROW_GROUP_ROWS: Final = 1_024

_EPOCH: Final = dt.datetime(1970, 1, 1)
_EPOCH_UTC: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class FileInfo:
    """One data file of the current snapshot.

    `key_bounds` holds one (lower, upper) pair per key column, in key order, as the same
    Python values `pa.Array.to_pylist()` gives for that column (int, str, Decimal, date,
    datetime, …); None when the file has no bounds for that column (then the file may
    contain any key).
    """

    path: str
    record_count: int
    size_bytes: int
    key_bounds: tuple[tuple[Any, Any] | None, ...]


@dataclass(frozen=True)
class Footer:
    """A written file's Parquet footer and size, as its writer returned them: the commit
    makes the file's metrics from it instead of reading the file back."""

    metadata: pq.FileMetaData
    size: int


def write_parquet(
    table: Table,
    arrow_table: pa.Table,
    sort_by_key: bool = True,
    schema: pa.Schema | None = None,
) -> list[str]:
    """Write rows as new Parquet data files of `table` and return their full paths
    (`write_parquet_files`)."""
    return list(write_parquet_files(table, arrow_table, sort_by_key, schema))


def write_parquet_files(
    table: Table,
    arrow_table: pa.Table,
    sort_by_key: bool = True,
    schema: pa.Schema | None = None,
) -> dict[str, Footer]:
    """Write rows as new Parquet data files of `table`: each file's full path (in the
    order written) and footer.

    The rows are cast to the table's Arrow schema (with Iceberg field ids) and sorted by
    key. Files roll over at TARGET_FILE_BYTES. Names are random (uuid), so a retry never
    overwrites a file an earlier attempt wrote. Nothing is written for zero rows. `schema`
    overrides the table's Arrow schema (a schema change being committed).
    """
    if arrow_table.num_rows == 0:
        return {}
    if schema is None:
        schema = arrow_schema(table)
    try:
        rows = arrow_table.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowInvalid, ValueError) as e:
        raise StreambedError(
            f"{_name(table)}: rows do not fit the lake table schema {schema}: {e}",
            kind=Kind.INTERNAL,
        ) from e
    keys = key_columns(table)
    if sort_by_key and keys:
        rows = rows.sort_by([(name, "ascending") for name in keys])
    group_rows = row_group_rows(rows)
    location_provider = table.location_provider()
    properties = table.io.properties
    written: list[str] = []
    footers: dict[str, Footer] = {}
    writer: pq.ParquetWriter | None = None
    sink: pa.NativeFile | None = None
    path = ""
    try:
        for offset in range(0, rows.num_rows, group_rows):
            if writer is None:
                path = location_provider.new_data_location(f"{uuid.uuid4()}.parquet")
                fs, fs_path = resolve(path, properties)
                if isinstance(fs, pafs.LocalFileSystem):
                    fs.create_dir(fs_path.rsplit("/", 1)[0], recursive=True)
                sink = fs.open_output_stream(fs_path)
                written.append(path)
                writer = pq.ParquetWriter(
                    sink,
                    schema,
                    compression="zstd",
                    write_statistics=True,
                    coerce_timestamps="us",
                )
            writer.write_table(rows.slice(offset, group_rows), row_group_size=group_rows)
            assert sink is not None
            if sink.tell() >= TARGET_FILE_BYTES:
                footers[path] = _close(writer, sink)
                writer, sink = None, None
        if writer is not None and sink is not None:
            footers[path] = _close(writer, sink)
    except OSError as e:
        _remove_quietly(written, properties)
        raise StorageError(f"{_name(table)}: cannot write a data file: {e}") from e
    return footers


def _close(writer: pq.ParquetWriter, sink: pa.NativeFile) -> Footer:
    writer.close()
    footer = Footer(writer.writer.metadata, sink.tell())
    sink.close()
    return footer


def data_files(table: Table) -> list[FileInfo]:
    """The data files of the table's current snapshot, with their key bounds."""
    return [file_info(table, f) for f in current_data_files(table).values()]


def current_data_files(table: Table) -> dict[str, DataFile]:
    """path → DataFile for every live data file of the current snapshot (its position-delete
    files: `streambed.lake.deletes.current_files`; a table with equality deletes is refused
    there)."""
    from streambed.lake.deletes import current_files

    return current_files(table).data


def file_info(table: Table, data_file: DataFile) -> FileInfo:
    schema = table.schema()
    bounds: list[tuple[Any, Any] | None] = []
    lower = data_file.lower_bounds or {}
    upper = data_file.upper_bounds or {}
    for name in key_columns(table):
        field = schema.find_field(name)
        low, high = lower.get(field.field_id), upper.get(field.field_id)
        if low is None or high is None:
            bounds.append(None)
            continue
        try:
            bounds.append((_decode(field.field_type, low), _decode(field.field_type, high)))
        except (OverflowError, ValueError, TypeError):
            bounds.append(None)  # e.g. a BC date: unknown bounds are always safe
    return FileInfo(
        path=data_file.file_path,
        record_count=data_file.record_count,
        size_bytes=data_file.file_size_in_bytes,
        key_bounds=tuple(bounds),
    )


def _decode(field_type: IcebergType, raw: bytes) -> Any:
    if not isinstance(field_type, PrimitiveType):
        raise TypeError(f"no bounds for {field_type}")
    value: Any = from_bytes(field_type, raw)
    if isinstance(field_type, DateType):
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if isinstance(field_type, TimeType):
        return (_EPOCH + dt.timedelta(microseconds=value)).time()
    if isinstance(field_type, TimestamptzType):
        return _EPOCH_UTC + dt.timedelta(microseconds=value)
    if isinstance(field_type, TimestampType):
        return _EPOCH + dt.timedelta(microseconds=value)
    return value


def row_group_rows(rows: pa.Table) -> int:
    """Rows per row group so that one group takes about `ROW_GROUP_MEMORY_BYTES` of Arrow."""
    per_row = max(1, rows.nbytes // max(1, rows.num_rows))
    wanted = ROW_GROUP_MEMORY_BYTES // per_row
    return int(max(MIN_ROW_GROUP_ROWS, min(MAX_ROW_GROUP_ROWS, wanted)))


def _remove_quietly(paths: list[str], properties: dict[str, str]) -> None:
    for path in paths:
        try:
            fs, fs_path = resolve(path, properties)
            fs.delete_file(fs_path)
        except OSError:
            pass  # an orphan; `streambed sweep` removes it


def _name(table: Table) -> str:
    return ".".join(table.name())
