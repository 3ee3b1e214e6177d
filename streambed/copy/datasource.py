"""The Spark Python data source of the copy (`streambed_pg_copy`): ctid ranges in, Parquet out.

One partition per ctid block range. Each task opens its own connection with the
replication session's output settings, imports the copy's snapshot (`BEGIN ISOLATION LEVEL
REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT`), and streams `COPY (SELECT ... WHERE
<ctid range>) TO STDOUT (FORMAT csv)`. The CSV text is cut at row boundaries into chunks of
`batch_bytes` (a range with a row larger than that is read again with blocks 8x larger),
parsed by Arrow's CSV reader, and each column converted by
`streambed.lake.convert` (the code that converts pgoutput values), so copied and streamed
rows are identical. The same task writes the rows as Parquet with pyarrow
(`streambed.lake.output`: Iceberg field ids, large row groups) to `output_dir`, a local path
or an `s3://` URI (pyarrow's filesystems, as `streambed.merge.pyarrow_source`). One chunk
and one row group are in memory at a time.

The rows the data source returns are not the table's: one small row per written file,
`(path, rows, bytes)`, which the driver collects and commits. No table row passes through
the JVM. A failed task deletes the files it wrote.

Options are strings. Spark redacts the value of options whose name matches `url`,
`secret` or `access.key`, so the source URL (with its password) and S3 keys never appear in
plans or logs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from streambed.copy.client import NATIVE, CopyClientError, RowTooLarge, find_psql, stream_copy
from streambed.copy.ranges import BlockRange, copy_statement, file_rows
from streambed.lake.convert import convert_column
from streambed.lake.output import (
    MAX_ROWS_PER_FILE,
    ROW_GROUP_BYTES,
    ROW_GROUP_ROWS,
    TaskOutput,
)
from streambed.lake.types import column_type
from streambed.merge.pyarrow_source import conform, decode_schema, filesystem
from streambed.pgoutput.messages import RelationColumn

READER = "streambed_pg_copy"
FILES_SCHEMA = "path STRING, rows BIGINT, bytes BIGINT"
ERROR_MARK = "streambed-copy-error:"
DEFAULT_BATCH_BYTES = 1024 * 1024
"""CSV block: smaller blocks stay in the CPU cache (1 MiB parsed faster than 8 MiB here)."""
MAX_BATCH_BYTES = 2**31 - 1  # Arrow's largest block; a Postgres value is at most 1 GB


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


def copy_failure(what: str, error: BaseException) -> RuntimeError:
    """An error whose message survives Spark's wrapping (see `job.worker_message`)."""
    return RuntimeError(f"{ERROR_MARK} {what}: {' '.join(str(error).split())} :{ERROR_MARK}")


class PgCopySource(DataSource):
    """Copy one source table under an imported snapshot into Parquet files, one task per
    ctid range; its rows describe the files written."""

    @classmethod
    def name(cls) -> str:
        return READER

    def schema(self) -> str:
        return FILES_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _RangeReader(dict(self.options))


class _RangeReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
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
        self.output_dir = options["output_dir"]
        self.row_group_rows = int(options.get("row_group_rows", str(ROW_GROUP_ROWS)))
        self.row_group_bytes = int(options.get("row_group_bytes", str(ROW_GROUP_BYTES)))
        self.max_rows_per_file = int(options.get("max_rows_per_file", str(MAX_ROWS_PER_FILE)))
        self.rows_per_block = float(options.get("rows_per_block", "0"))
        self.table_blocks = int(options.get("table_blocks", "0"))
        self.unique: list[str] = json.loads(options.get("unique", "[]"))

    def partitions(self) -> Sequence[InputPartition]:
        return [RangePartition(i, r.start, r.end) for i, r in enumerate(self.ranges)]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int]]:
        assert isinstance(partition, RangePartition)
        qualified = f"{self.schema_name}.{self.table}"
        names = [c.name for c in self.columns]
        statement = copy_statement(
            self.schema_name, self.table, names, BlockRange(partition.start, partition.end)
        )
        fs, base = filesystem(self.output_dir, self.options)
        end = partition.end if partition.end is not None else self.table_blocks
        max_rows = file_rows(end - partition.start, self.rows_per_block, self.max_rows_per_file)
        block = self.batch_bytes
        while True:
            # Each attempt (a Spark retry, or a re-read with larger blocks) writes under
            # its own names, and a failed one deletes its files.
            output = TaskOutput(
                fs,
                base,
                self.output_dir,
                f"{self.run_id}-{partition.index:05d}-{uuid.uuid4().hex[:8]}",
                self.arrow_schema,
                row_group_rows=self.row_group_rows,
                row_group_bytes=self.row_group_bytes,
                max_rows_per_file=max_rows,
                unique=self.unique,
            )
            try:
                for raw in stream_copy(
                    self.url,
                    self.snapshot,
                    statement,
                    csv_types(self.columns),
                    application_name=f"streambed-copy {self.run_id}/{partition.index}",
                    batch_bytes=block,
                    psql=find_psql(),
                ):
                    output.write(raw_to_table(raw, self.columns, self.arrow_schema, qualified))
                files = output.close()
                break
            except RowTooLarge as e:
                output.discard()
                if block >= MAX_BATCH_BYTES:
                    raise copy_failure(f"copying {qualified}", e) from None
                block = min(block * 8, MAX_BATCH_BYTES)
            except CopyClientError as e:
                output.discard()
                raise copy_failure(f"copying {qualified}", e) from None
            except BaseException:
                output.discard()
                raise
        for f in files:
            yield (f.uri, f.rows, f.bytes)


def csv_types(columns: Sequence[RelationColumn]) -> list[pa.DataType]:
    """What the CSV reader makes of each column: the parsed type for the kinds it reads as
    the stream's converter would (`client.NATIVE`), else the raw bytes."""
    return [NATIVE.get(column_type(c).kind, pa.binary()) for c in columns]


def raw_to_table(
    raw: pa.RecordBatch, columns: Sequence[RelationColumn], arrow_schema: pa.Schema, qualified: str
) -> pa.Table:
    """CSV fields (raw bytes, or already parsed: `csv_types`) → a table of the lake table's
    Arrow schema.

    Each raw column goes through `convert_column`, as streamed values do, then is cast to
    the lake table's type; a NULL in a required column is an error, never written.
    """
    arrays = []
    for i, column in enumerate(columns):
        if raw.column(i).type != pa.binary():
            arrays.append(raw.column(i))
            continue
        array, _ = convert_column(
            ArrowValues(raw.column(i)),
            column_type(column),
            where=f"{qualified}.{column.name}",
            allow_unchanged=False,
        )
        arrays.append(array)
    table = pa.Table.from_arrays(arrays, names=[c.name for c in columns])
    return conform(table, arrow_schema, by_field_id=False)
