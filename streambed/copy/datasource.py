"""Spark Python data sources of the copy: ctid ranges of a source table in, Parquet out.

`streambed_pg_copy` (reading): one partition per ctid block range. Each partition's reader
opens its own connection with the replication session's output settings, imports the
copy's snapshot (`BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION
SNAPSHOT`), and streams `COPY (SELECT ... WHERE <ctid range>) TO STDOUT (FORMAT csv)`. The
CSV text is cut at row boundaries into chunks of `batch_bytes`, parsed by Arrow's CSV
reader, and each column converted by `streambed.lake.convert` (the code that converts
pgoutput values), so copied and streamed rows are identical. One chunk is in memory at a
time.

`streambed_copy_parquet` (writing): like `streambed_parquet`'s writer (same manifest, so
`read_manifest` returns the files), but it gathers Spark's small Arrow batches into row
groups of `row_group_rows` rows (or `row_group_bytes`), so copied files read as fast as
merged ones.

Options are strings. Spark redacts the value of options whose name matches `url`, so the
source URL (with its password) never appears in plans or logs.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from streambed.copy.client import CopyClientError, find_psql, stream_copy
from streambed.copy.ranges import BlockRange, copy_statement
from streambed.lake.convert import convert_column
from streambed.lake.types import column_type
from streambed.merge.pyarrow_source import (
    MANIFEST_DIR,
    WrittenFiles,
    conform,
    decode_schema,
    filesystem,
    join_uri,
    spark_arrow_type,
)
from streambed.pgoutput.messages import RelationColumn

READER = "streambed_pg_copy"
WRITER = "streambed_copy_parquet"
ERROR_MARK = "streambed-copy-error:"
DEFAULT_BATCH_BYTES = 8 * 1024 * 1024


class ArrowValues(Sequence[bytes | None]):
    """A binary Arrow array seen as a sequence of values: `pa.array()` takes the array as it
    is (`__arrow_array__`); Python values are made only if a column needs the slow path."""

    def __init__(self, array: pa.Array) -> None:
        self.array = array
        self._values: list[bytes | None] | None = None

    def __arrow_array__(self, type: pa.DataType | None = None) -> pa.Array:
        return self.array if type is None else self.array.cast(type)

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, index: int) -> bytes | None: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes | None]: ...
    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes | None] | None:
        if self._values is None:
            self._values = self.array.to_pylist()
        return self._values[index]


@dataclass(frozen=True)
class RangePartition(InputPartition):
    index: int
    start: int
    end: int | None


def _make_dir(fs: pafs.FileSystem, path: str) -> None:
    if isinstance(fs, pafs.LocalFileSystem):  # object stores have no directories
        fs.create_dir(path, recursive=True)


def copy_failure(what: str, error: BaseException) -> RuntimeError:
    """An error whose message survives Spark's wrapping (see `job.worker_message`)."""
    return RuntimeError(f"{ERROR_MARK} {what}: {' '.join(str(error).split())} :{ERROR_MARK}")


class PgCopySource(DataSource):
    """Read one source table under an imported snapshot, partitioned by ctid range."""

    @classmethod
    def name(cls) -> str:
        return READER

    def schema(self) -> StructType:
        raise ValueError(f"{READER} needs an explicit schema")

    def reader(self, schema: StructType) -> DataSourceReader:
        return _RangeReader(dict(self.options))


class _RangeReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.url = options["url"]
        self.snapshot = options["snapshot"]
        self.schema_name = options["schema"]
        self.table = options["table"]
        self.run_id = options["run_id"]
        self.columns = [
            RelationColumn(0, n, int(o), int(m)) for n, o, m in json.loads(options["columns"])
        ]
        self.ranges = [BlockRange(s, e) for s, e in json.loads(options["ranges"])]
        self.batch_bytes = int(options.get("batch_bytes", str(DEFAULT_BATCH_BYTES)))
        self.arrow_schema = decode_schema(options["arrow_schema"])

    def partitions(self) -> Sequence[InputPartition]:
        return [RangePartition(i, r.start, r.end) for i, r in enumerate(self.ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        qualified = f"{self.schema_name}.{self.table}"
        names = [c.name for c in self.columns]
        statement = copy_statement(
            self.schema_name, self.table, names, BlockRange(partition.start, partition.end)
        )
        batches = stream_copy(
            self.url,
            self.snapshot,
            statement,
            len(names),
            application_name=f"streambed-copy {self.run_id}/{partition.index}",
            batch_bytes=self.batch_bytes,
            psql=find_psql(),
        )
        try:
            for raw in batches:
                yield raw_to_spark(raw, self.columns, self.arrow_schema, qualified)
        except CopyClientError as e:
            raise copy_failure(f"copying {qualified}", e) from None


def raw_to_spark(
    raw: pa.RecordBatch, columns: Sequence[RelationColumn], arrow_schema: pa.Schema, qualified: str
) -> pa.RecordBatch:
    """Raw CSV fields (bytes, NULL) → one Arrow batch in Spark's types.

    Each column goes through `convert_column`, as streamed values do, then is cast to the
    lake table's type and to the type Spark exchanges for it.
    """
    arrays = []
    fields = []
    for i, column in enumerate(columns):
        array, _ = convert_column(
            ArrowValues(raw.column(i)),
            column_type(column),
            where=f"{qualified}.{column.name}",
            allow_unchanged=False,
        )
        field = arrow_schema.field(column.name)
        if array.type != field.type:
            array = array.cast(field.type)
        spark_type = spark_arrow_type(field.type)
        if array.type != spark_type:
            array = array.cast(spark_type)
        arrays.append(array)
        fields.append(pa.field(column.name, spark_type, field.nullable))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


@dataclass(frozen=True)
class CopiedFiles(WrittenFiles):
    rows: int = 0


class CopyParquetSink(DataSource):
    """Write Parquet with Iceberg field ids in large row groups; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return WRITER

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return _RowGroupWriter(dict(self.options))


class _RowGroupWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.output_dir = options["output_dir"]
        self.run_id = options["run_id"]
        self.arrow_schema = decode_schema(options["arrow_schema"])
        self.max_rows = int(options.get("max_rows_per_file", "4000000"))
        self.group_rows = int(options.get("row_group_rows", "262144"))
        self.group_bytes = int(options.get("row_group_bytes", str(64 * 1024 * 1024)))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CopiedFiles:
        fs, base = filesystem(self.output_dir, self.options)
        task = uuid.uuid4().hex[:12]
        _make_dir(fs, base)
        written: list[str] = []
        writer: pq.ParquetWriter | None = None
        rows_in_file = 0
        total = 0
        pending: list[pa.Table] = []
        pending_rows = 0
        pending_bytes = 0

        def flush_group() -> None:
            nonlocal writer, rows_in_file, pending, pending_rows, pending_bytes
            group = pa.concat_tables(pending)
            pending, pending_rows, pending_bytes = [], 0, 0
            start = 0
            while start < group.num_rows:
                if writer is None:
                    name = f"{self.run_id}-{task}-{len(written):05d}.parquet"
                    written.append(join_uri(self.output_dir, name))
                    writer = pq.ParquetWriter(
                        join_uri(base, name), self.arrow_schema, filesystem=fs, compression="zstd"
                    )
                    rows_in_file = 0
                take = min(self.max_rows - rows_in_file, group.num_rows - start)
                writer.write_table(group.slice(start, take), row_group_size=take)
                start += take
                rows_in_file += take
                if rows_in_file >= self.max_rows:
                    writer.close()
                    writer = None

        try:
            for batch in iterator:
                table = conform(
                    pa.Table.from_batches([batch]), self.arrow_schema, by_field_id=False
                )
                pending.append(table)
                pending_rows += table.num_rows
                pending_bytes += table.nbytes
                total += table.num_rows
                if pending_rows >= self.group_rows or pending_bytes >= self.group_bytes:
                    flush_group()
            if pending:
                flush_group()
        finally:
            if writer is not None:
                writer.close()
        return CopiedFiles(tuple(written), total)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [p for m in messages if isinstance(m, WrittenFiles) for p in m.paths]
        fs, base = filesystem(self.output_dir, self.options)
        run_dir = join_uri(base, f"{MANIFEST_DIR}/{self.run_id}")
        _make_dir(fs, run_dir)
        with fs.open_output_stream(join_uri(run_dir, "files.json")) as f:
            f.write(json.dumps(files).encode())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        for m in messages:
            if not isinstance(m, WrittenFiles):
                continue
            for uri in m.paths:
                fs, path = filesystem(uri, self.options)
                with contextlib.suppress(FileNotFoundError):
                    fs.delete_file(path)
