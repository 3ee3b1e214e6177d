"""Parquet through pyarrow filesystems, as Spark Python data sources (`streambed_parquet`).

The pyspark wheel has no S3 connector (and none can be installed offline for its Hadoop), so
Spark reads and writes S3 objects through these data sources, which use pyarrow's
S3FileSystem in the Python workers. They run wherever Spark runs its Python workers, so the
same code works on a cluster (streambed must be installed on the workers). They also serve
local paths, which the tests use, and local writes whose schema Spark's own Parquet writer
cannot produce exactly (nested field ids, fixed-size binary).

Reading: one partition per file; columns are matched by Iceberg field id
(`PARQUET:field_id`), so renamed columns are found and columns added after the file was
written read as NULL. Batches are cast to the Arrow form of the Spark schema.

Writing: each task writes its rows, in the order it receives them, to files named
`<run_id>-<task>-<n>.parquet` in the output directory, rolling to a new file at
`max_rows_per_file`, cast to the table's Arrow schema (field ids, required columns,
microsecond timestamps). Tasks report their files; the job commit writes the list to
`_streambed/<run_id>/files.json` under the output directory, which `read_manifest` returns and
removes, so a retried task's leftovers are never reported. An aborted job deletes the
files its tasks reported.

Options (all strings): `paths` (JSON list, reading), `deleted` (JSON object, reading: path
-> row positions a pending position-delete file hides, skipped), `output_dir`, `run_id`,
`arrow_schema` (base64 of the serialized Arrow schema), `max_rows_per_file`, and the
filesystem's (`streambed.storage.s3.S3Access.source_options`): `s3.endpoint`, `s3.region`,
`s3.access.key`, `s3.secret.key`. Spark redacts options whose names match `secret` or
`access.key` from plans and logs.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

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

from streambed.core.config import Settings
from streambed.lake.merge.contract import conform, without_positions
from streambed.lake.output import TaskOutput
from streambed.spark.worker_heap import settle
from streambed.storage import s3

NAME = "streambed_parquet"
MANIFEST_DIR = "_streambed"


def fs_options(settings: Settings) -> dict[str, str]:
    """The S3 options of the data source (and `SparkMerger`) for streambed's settings."""
    return s3.S3Access.from_settings(settings).source_options()


def filesystem(uri: str, options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem for `uri` and the path inside it, from the data source's
    options (`streambed.storage.s3.filesystem`)."""
    return s3.filesystem(uri, s3.S3Access.from_source_options(options))


def _make_dir(fs: pafs.FileSystem, path: str) -> None:
    # Only local filesystems need directories; on S3 pyarrow would create marker objects.
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(path, recursive=True)


def join_uri(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def read_manifest(output_dir: str, run_id: str, options: Mapping[str, str]) -> list[str]:
    """The files a committed write job wrote, in order; removes the manifest."""
    fs, base = filesystem(output_dir, options)
    run_dir = join_uri(base, f"{MANIFEST_DIR}/{run_id}")
    path = join_uri(run_dir, "files.json")
    with fs.open_input_stream(path) as f:
        files: list[str] = json.loads(f.read())
    if isinstance(fs, pafs.LocalFileSystem):
        fs.delete_file(path)
        with contextlib.suppress(OSError):
            os.rmdir(run_dir)
            os.rmdir(join_uri(base, MANIFEST_DIR))
    else:
        # pyarrow's S3 delete_file leaves a marker object for the parent "directory";
        # deleting this run's own prefix does not (it may leave an empty `_streambed/`).
        fs.delete_dir(run_dir)
    return files


def spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type Spark exchanges for a column of table type `t`."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz is not None else None)
    if pa.types.is_time(t):
        return pa.time64("ns")  # Spark's TIME exchanges nanoseconds
    if pa.types.is_fixed_size_binary(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(spark_arrow_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, spark_arrow_type(f.type)) for f in t])
    return t


@dataclass(frozen=True)
class _FilePartition(InputPartition):
    path: str


@dataclass(frozen=True)
class WrittenFiles(WriterCommitMessage):
    paths: tuple[str, ...]


class StreambedParquet(DataSource):
    """Read given Parquet files, or write Parquet files, through pyarrow filesystems."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        raise ValueError(f"{NAME} needs an explicit schema: spark.read.format(...).schema(...)")

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(schema, dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return _Writer(dict(self.options))


class _Reader(DataSourceReader):
    def __init__(self, schema: StructType, options: dict[str, str]) -> None:
        self.options = options
        self.paths: list[str] = json.loads(options["paths"])
        self.deleted: dict[str, list[int]] = json.loads(options.get("deleted", "{}"))
        self.arrow_schema = decode_schema(options["arrow_schema"])
        names = [f.name for f in schema.fields]
        if names != self.arrow_schema.names:
            raise ValueError(
                f"{NAME}: spark schema {names} != arrow schema {self.arrow_schema.names}"
            )

    def partitions(self) -> Sequence[InputPartition]:
        return [_FilePartition(p) for p in self.paths]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _FilePartition)
        settle()
        target = pa.schema(
            [
                pa.field(f.name, spark_arrow_type(f.type), True, f.metadata)
                for f in self.arrow_schema
            ]
        )
        fs, path = filesystem(partition.path, self.options)
        parquet = pq.ParquetFile(path, filesystem=fs)
        deleted = self.deleted.get(partition.path)
        hidden = pa.array(deleted, pa.int64()) if deleted else None
        offset = 0
        for batch in parquet.iter_batches(batch_size=65536):
            table = without_positions(pa.Table.from_batches([batch]), hidden, offset)
            offset += batch.num_rows
            table = conform(table, target, by_field_id=True)
            yield from table.to_batches()


class _Writer(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.output_dir = options["output_dir"]
        self.run_id = options["run_id"]
        self.arrow_schema = decode_schema(options["arrow_schema"])
        self.max_rows = int(options.get("max_rows_per_file", "1000000"))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        settle()
        fs, base = filesystem(self.output_dir, self.options)
        output = TaskOutput(
            fs,
            base,
            self.output_dir,
            f"{self.run_id}-{uuid.uuid4().hex[:12]}",
            self.arrow_schema,
            row_group_rows=1,  # each Spark batch is one row group
            max_rows_per_file=self.max_rows,
        )
        try:
            for batch in iterator:
                table = pa.Table.from_batches([batch])
                output.write(conform(table, self.arrow_schema, by_field_id=False))
            files = output.close()
        except BaseException:
            output.discard()  # a failed task's files are in no manifest
            raise
        return WrittenFiles(tuple(f.uri for f in files))

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
