"""The Spark Python data source of the copy (`streambed_pg_copy`): ctid ranges in, Parquet out.

One partition per ctid block range. Each task opens its own connection with the
replication session's output settings, imports the copy's snapshot (`SET TRANSACTION
SNAPSHOT` first in a REPEATABLE READ, READ ONLY transaction), and reads its range
(`SELECT ... WHERE <ctid range>`) with the configured reader: binary COPY decoded by DuckDB
(`streambed.copy.duck`, the default) or CSV through psql and Arrow's CSV reader
(`streambed.copy.client`). Columns the reader cannot decode exactly arrive as their text
form and are converted by `streambed.lake.convert` (the code that converts pgoutput
values), so copied and streamed rows are identical. The same task writes the rows as
Parquet with pyarrow (`streambed.lake.output`: Iceberg field ids, large row groups) to
`output_dir`, a local path or an `s3://` URI (pyarrow's filesystems, as
`streambed.merge.pyarrow_source`). One batch and one row group are in memory at a time.

This module is what Spark's planning workers import (to create the source and list its
partitions), so it imports nothing heavy: a task's work is in `streambed.copy.task`,
imported by the task itself. The first copy of a process starts four kinds of Python worker
one after another, and each used to import pyarrow, psycopg and pyiceberg for this.

The rows the data source returns are not the table's: one small row per written file,
`(path, rows, bytes, started, ended)` (the last two: when its task began and finished
copying, in seconds since the epoch), which the driver collects and commits. No table
row passes through the JVM. A failed task deletes the files it wrote.

Options are strings. Spark redacts the value of options whose name matches `url`,
`secret` or `access.key`, so the source URL (with its password) and S3 keys never appear in
plans or logs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

READER = "streambed_pg_copy"
FILES_SCHEMA = "path STRING, rows BIGINT, bytes BIGINT, started DOUBLE, ended DOUBLE"
ERROR_MARK = "streambed-copy-error:"
SCHEMA_MARK = "a value cannot be stored"  # `copy_failure`'s `what` for a SchemaError


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
        self.ranges: list[tuple[int, int | None]] = [
            (int(s), None if e is None else int(e)) for s, e in json.loads(options["ranges"])
        ]

    def partitions(self) -> Sequence[InputPartition]:
        return [RangePartition(i, s, e) for i, (s, e) in enumerate(self.ranges)]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int, float, float]]:
        assert isinstance(partition, RangePartition)
        from streambed.copy.task import copy_range  # here, not at the top: see the module doc

        yield from copy_range(self.options, partition.index, partition.start, partition.end)
