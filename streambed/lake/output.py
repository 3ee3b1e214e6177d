"""The Parquet files one Spark task writes (a copy task, a merge's writer), through a
pyarrow filesystem (local or S3).

Tables are gathered until `row_group_rows` rows (or `row_group_bytes` of Arrow) are
pending, and what is pending is written as one row group (a copy gathers large groups; a
merge writes each Spark batch as one, `row_group_rows=1`); files are rolled at
`max_rows_per_file`. Every file is named `<prefix>-<n>.parquet` and written with the lake
table's Arrow schema (Iceberg field ids, required columns, zstd; no dictionary for the
`unique` columns: a one-column key; a dictionary field is written as its values' type).
`close()` returns what was written, each file with its footer (the commit builds the
file's Iceberg metrics from it instead of reading the file back, `lake.files.Footer`);
`discard()` deletes it (a failed task leaves nothing it knows of).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

ROW_GROUP_ROWS: Final = 262_144
ROW_GROUP_BYTES: Final = 64 * 1024 * 1024
MAX_ROWS_PER_FILE: Final = 4_000_000


@dataclass(frozen=True)
class WrittenFile:
    uri: str
    rows: int
    bytes: int
    footer: pq.FileMetaData | None = None


class TaskOutput:
    """Parquet files under `directory` (the URI reported) = `base` in `fs`."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        base: str,
        directory: str,
        prefix: str,
        schema: pa.Schema,
        *,
        row_group_rows: int = ROW_GROUP_ROWS,
        row_group_bytes: int = ROW_GROUP_BYTES,
        max_rows_per_file: int = MAX_ROWS_PER_FILE,
        unique: Sequence[str] = (),
    ) -> None:
        if min(row_group_rows, row_group_bytes, max_rows_per_file) < 1:
            raise ValueError("row group and file limits must be positive")
        self.fs = fs
        self.base = base.rstrip("/")
        self.directory = directory.rstrip("/")
        self.prefix = prefix
        self.schema = schema
        self.row_group_rows = row_group_rows
        self.row_group_bytes = row_group_bytes
        self.max_rows_per_file = max_rows_per_file
        # A column whose values are all distinct (the key) gains nothing from a dictionary:
        # Arrow would build one per row group until it outgrows its page and falls back.
        self.use_dictionary: bool | list[str] = (
            [f.name for f in schema if f.name not in unique] if unique else True
        )
        # Dictionary columns (a copy's `char(n)`, `streambed.copy.duck.pad_distinct`) are
        # written as the strings they hold: the Arrow schema is not stored, so every reader
        # (pyiceberg's footer check too) sees the lake table's types.
        self._dictionaries = any(pa.types.is_dictionary(f.type) for f in schema)
        self.files: list[WrittenFile] = []
        self._started: list[str] = []  # paths in `fs`, for discard()
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._stream: pa.NativeFile | None = None
        self._writer: pq.ParquetWriter | None = None
        self._rows_in_file = 0
        if isinstance(fs, pafs.LocalFileSystem):  # on S3 pyarrow would write marker objects
            fs.create_dir(self.base, recursive=True)

    def write(self, table: pa.Table) -> None:
        """Add rows (already of `schema`); full row groups are written out."""
        if table.num_rows == 0:
            return
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self._pending_bytes += table.nbytes
        if self._pending_rows >= self.row_group_rows or self._pending_bytes >= self.row_group_bytes:
            self._flush()

    def close(self) -> list[WrittenFile]:
        """Write what is pending and close the last file; the files written, in order."""
        self._flush()
        self._close_file()
        return list(self.files)

    def discard(self) -> None:
        """Close and delete every file this output started (best effort)."""
        with contextlib.suppress(Exception):
            if self._writer is not None:
                self._writer.close()
        with contextlib.suppress(Exception):
            if self._stream is not None:
                self._stream.close()
        self._writer = self._stream = None
        for path in self._started:
            with contextlib.suppress(OSError):
                self.fs.delete_file(path)

    def _flush(self) -> None:
        if not self._pending:
            return
        group = pa.concat_tables(self._pending)
        if self._dictionaries:  # one dictionary per row group, else each batch is decoded
            group = group.unify_dictionaries()
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        start = 0
        while start < group.num_rows:
            if self._writer is None:
                self._open_file()
            assert self._writer is not None
            take = min(self.max_rows_per_file - self._rows_in_file, group.num_rows - start)
            self._writer.write_table(group.slice(start, take), row_group_size=take)
            start += take
            self._rows_in_file += take
            if self._rows_in_file >= self.max_rows_per_file:
                self._close_file()

    def _open_file(self) -> None:
        name = f"{self.prefix}-{len(self._started):05d}.parquet"
        path = f"{self.base}/{name}"
        self._started.append(path)
        self._stream = self.fs.open_output_stream(path)
        self._writer = pq.ParquetWriter(
            self._stream,
            self.schema,
            compression="zstd",
            use_dictionary=self.use_dictionary,
            store_schema=not self._dictionaries,
        )
        self._rows_in_file = 0

    def _close_file(self) -> None:
        if self._writer is None or self._stream is None:
            return
        self._writer.close()
        footer = self._writer.writer.metadata
        size = self._stream.tell()
        self._stream.close()
        name = self._started[-1].rsplit("/", 1)[-1]
        self.files.append(WrittenFile(f"{self.directory}/{name}", self._rows_in_file, size, footer))
        self._writer = self._stream = None
