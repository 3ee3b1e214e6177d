"""One copy task: a ctid range of a source table read under the snapshot and written as
Parquet files (see docs/initial-copy.md).

`streambed.copy.job` runs a copy as one Spark job over an RDD of the table's ranges, one
range per partition; each task calls `copy_partition` with the copy's `options` (strings),
which Spark pickles with the function. Each task opens its own connection with the
replication session's output settings and imports the copy's snapshot (`SET TRANSACTION
SNAPSHOT` first in a REPEATABLE READ, READ ONLY transaction) before it reads its range.
What a task returns are not the table's rows: one small tuple per written file, which the
driver collects and commits. No table row passes through the JVM. A failed task deletes
the files it wrote.

The range is read by one of two readers (the option `reader`):

- `duckdb` (the default): DuckDB's postgres extension reads binary COPY and decodes the
  columns it decodes exactly (`streambed.copy.duck.native`); the others arrive as their
  output text. A table whose rows are wide (`duck.WIDE_ROW_BYTES`), or a range DuckDB runs
  out of memory on, is read with the csv reader: DuckDB holds 2048 rows at a time.
- `csv`: psql and Arrow's CSV reader (`streambed.copy.client.stream_copy`); integer and
  text columns are parsed by the reader (`csv_types`), the others arrive as raw text.

Raw text is converted by `streambed.lake.convert` as the stream's values are, and the rows
are written by `streambed.lake.output.TaskOutput`. Returns one `(path, rows, bytes, started,
ended, footer)` per file: when the task began and finished copying (seconds since the
epoch), which the copy's progress turns into its rate, and the file's Parquet footer, which
the commit turns into the file's metrics without reading the file back.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from typing import Protocol, overload

import pyarrow as pa
import pyarrow.parquet as pq

from streambed.copy.client import NATIVE, CopyClientError, RowTooLarge, find_psql, stream_copy
from streambed.copy.duck import (
    MEMORY_LIMIT,
    WIDE_ROW_BYTES,
    OutOfMemory,
    batch_rows,
    char_length,
    few_distinct,
    native,
    restore,
    select_query,
    stream_range,
)
from streambed.copy.ranges import BlockRange, copy_statement, file_rows, range_filter
from streambed.core.errors import ConfigError, SchemaError
from streambed.lake.convert import convert_column
from streambed.lake.merge.contract import conform
from streambed.lake.output import (
    MAX_ROWS_PER_FILE,
    ROW_GROUP_BYTES,
    ROW_GROUP_ROWS,
    TaskOutput,
)
from streambed.lake.types import column_type
from streambed.pgoutput.messages import RelationColumn
from streambed.spark.data_source import decode_schema, filesystem
from streambed.spark.worker_heap import settle

logger = logging.getLogger("streambed.copy")

READERS = ("duckdb", "csv")
ERROR_MARK = "streambed-copy-error:"
SCHEMA_MARK = "a value cannot be stored"  # `copy_failure`'s `what` for a SchemaError


class RangeStopped(Exception):
    """A range copied in streambed's process stopped because another range of its table
    failed, or because streambed is stopping (`streambed.copy.here`)."""


class Stop(Protocol):
    """What a range checks before each batch (a `threading.Event`, or several)."""

    def is_set(self) -> bool: ...


Written = tuple[str, int, int, float, float, pq.FileMetaData | None]
"""A written file: (path, rows, bytes, started, ended, footer); started and ended are when
its task began and finished copying, in seconds since the epoch."""


def copy_failure(what: str, error: BaseException) -> RuntimeError:
    """An error whose message survives Spark's wrapping (see `job.worker_message`)."""
    return RuntimeError(f"{ERROR_MARK} {what}: {' '.join(str(error).split())} :{ERROR_MARK}")


def copy_partition(
    options: Mapping[str, str], ranges: Iterable[tuple[int, int, int | None]]
) -> Iterator[Written]:
    """A Spark task: copy the partition's ranges, `(index, first block, end block)` each
    (one per partition), as `options` describe; yields each written file."""
    settle()
    for index, start, end in ranges:
        yield from copy_range(options, index, start, end)


DEFAULT_BATCH_BYTES = 1024 * 1024
"""CSV block: a small block stays in the CPU cache while it is parsed, and its first batch
arrives sooner."""
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


def copy_range(
    options: Mapping[str, str],
    index: int,
    start: int,
    end: int | None,
    *,
    stop: Stop | None = None,
) -> Iterator[Written]:
    """Copy range `index`, heap blocks `[start, end)` (`end` None: to the table's end), as
    the copy's `options` describe; yields each written file. Once `stop` is set, the next
    batch raises `RangeStopped` (the range's files are deleted)."""
    began = time.time()
    schema_name, table = options["schema"], options["table"]
    run_id, output_dir = options["run_id"], options["output_dir"]
    qualified = f"{schema_name}.{table}"
    columns = [RelationColumn(0, n, int(o), int(m)) for n, o, m in json.loads(options["columns"])]
    arrow_schema = decode_schema(options["arrow_schema"])
    block_range = BlockRange(start, end)
    reader = options.get("reader", "duckdb")
    if reader not in READERS:
        raise copy_failure(f"copying {qualified}", ValueError(f"unknown copy reader {reader!r}"))
    fs, base = filesystem(output_dir, options)
    last = end if end is not None else int(options.get("table_blocks", "0"))
    max_rows = file_rows(
        last - start,
        float(options.get("rows_per_block", "0")),
        int(options.get("max_rows_per_file", str(MAX_ROWS_PER_FILE))),
    )
    block = int(options.get("batch_bytes", str(DEFAULT_BATCH_BYTES)))
    unique: list[str] = json.loads(options.get("unique", "[]"))
    if reader == "duckdb" and float(options.get("row_bytes", "0")) > WIDE_ROW_BYTES:
        reader = "csv"
    while True:
        # Each attempt (a Spark retry, or a re-read with larger blocks) writes under its own
        # names, and a failed one deletes its files.
        output: TaskOutput | None = None
        try:
            parsed, batches, schema = _read(
                options, columns, arrow_schema, unique, index, block_range, reader, block
            )
            output = TaskOutput(
                fs,
                base,
                output_dir,
                f"{run_id}-{index:05d}-{uuid.uuid4().hex[:8]}",
                schema,
                row_group_rows=int(options.get("row_group_rows", str(ROW_GROUP_ROWS))),
                row_group_bytes=int(options.get("row_group_bytes", str(ROW_GROUP_BYTES))),
                max_rows_per_file=max_rows,
                unique=unique,
            )
            try:
                for raw in batches:
                    if stop is not None and stop.is_set():
                        raise RangeStopped(f"{qualified}: the copy was stopped")
                    output.write(raw_to_table(raw, columns, schema, qualified, parsed))
            finally:
                # Ends the reader's query now, on this thread (an error's traceback would
                # otherwise keep the reader, and its connection, until it is freed).
                close = getattr(batches, "close", None)
                if close is not None:
                    close()
            files = output.close()
            break
        except OutOfMemory as e:  # rows too wide for DuckDB's 2048-row vectors
            _discard(output)
            logger.warning("copying %s with the csv reader instead: %s", qualified, e)
            reader = "csv"
        except RowTooLarge as e:
            _discard(output)
            if block >= MAX_BATCH_BYTES:
                raise copy_failure(f"copying {qualified}", e) from None
            block = min(block * 8, MAX_BATCH_BYTES)
        except (CopyClientError, ConfigError) as e:  # ConfigError: no DuckDB extension here
            _discard(output)
            raise copy_failure(f"copying {qualified}", e) from None
        except SchemaError as e:  # a value the lake table cannot hold exactly
            _discard(output)
            raise copy_failure(SCHEMA_MARK, e) from None
        except BaseException:
            _discard(output)
            raise
    ended = time.time()
    for f in files:
        yield (f.uri, f.rows, f.bytes, began, ended, f.footer)


def _discard(output: TaskOutput | None) -> None:
    if output is not None:
        output.discard()


def _read(
    options: Mapping[str, str],
    columns: Sequence[RelationColumn],
    arrow_schema: pa.Schema,
    unique: Sequence[str],
    index: int,
    block_range: BlockRange,
    reader: str,
    block: int,
) -> tuple[list[bool], Iterator[pa.RecordBatch], pa.Schema]:
    """Which columns the reader parses, its batches of the range, and the schema to write
    them with: the lake table's, with a dictionary type for each `char(n)` column the
    DuckDB reader pads as a dictionary (`duck.pad_distinct`: chosen by the first batch, when
    its values repeat, `duck.few_distinct`; not a `unique` column, a one-column key)."""
    name = f"streambed-copy {options['run_id']}/{index}"
    schema_name, table = options["schema"], options["table"]
    only = bool(options.get("only", "1"))
    row_filter = options.get("row_filter") or None
    if reader == "duckdb":
        outputs = [tuple(f) for f in json.loads(options.get("outputs", "[]"))]
        predicate = range_filter(block_range, row_filter)
        query = select_query(schema_name, table, columns, predicate, outputs=outputs, only=only)
        batches = stream_range(
            options["url"],
            options["snapshot"],
            query,
            application_name=name,
            batch_rows=batch_rows(float(options.get("row_bytes", "0"))),
            memory_limit=options.get("duckdb_memory_limit", MEMORY_LIMIT),
        )
        first = next(batches, None)
        distinct = {
            i
            for i, c in enumerate(columns)
            if char_length(c) is not None
            and c.name not in unique
            and first is not None
            and few_distinct(first.column(i))
        }
        where = f"{schema_name}.{table}"
        restored = _restored(batches, first, columns, where, distinct)
        return [native(c) for c in columns], restored, dictionary_schema(arrow_schema, distinct)
    types = csv_types(columns)
    statement = copy_statement(
        schema_name, table, [c.name for c in columns], block_range, only=only, row_filter=row_filter
    )
    batches = stream_copy(
        options["url"],
        options["snapshot"],
        statement,
        types,
        application_name=name,
        batch_bytes=block,
        psql=find_psql(),
    )
    return [t != pa.binary() for t in types], batches, arrow_schema


def _restored(
    batches: Iterator[pa.RecordBatch],
    first: pa.RecordBatch | None,
    columns: Sequence[RelationColumn],
    where: str,
    distinct: Container[int],
) -> Iterator[pa.RecordBatch]:
    """`first` and the rest of `batches`, each `duck.restore`d. Closes `batches` when it
    ends, is closed or raises (a value refused), so the reader's query ends at once on the
    range's thread rather than when an error's traceback is freed."""
    try:
        for batch in itertools.chain([] if first is None else [first], batches):
            yield restore(batch, columns, where, distinct)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def dictionary_schema(schema: pa.Schema, positions: Container[int]) -> pa.Schema:
    """`schema` with the fields at `positions` as dictionaries of their type (the field's
    Iceberg id kept)."""
    return pa.schema(
        [
            f.with_type(pa.dictionary(pa.int32(), f.type)) if i in positions else f
            for i, f in enumerate(schema)
        ],
        metadata=schema.metadata,
    )


def csv_types(columns: Sequence[RelationColumn]) -> list[pa.DataType]:
    """What the CSV reader makes of each column: the parsed type for the kinds it reads as
    the stream's converter would (`client.NATIVE`), else the raw bytes."""
    return [NATIVE.get(column_type(c).kind, pa.binary()) for c in columns]


def raw_to_table(
    raw: pa.RecordBatch,
    columns: Sequence[RelationColumn],
    arrow_schema: pa.Schema,
    qualified: str,
    parsed: Sequence[bool],
) -> pa.Table:
    """A reader's batch → a table of the lake table's Arrow schema. `parsed[i]`: column `i`
    holds values (parsed by the reader), else the text form (string or binary).

    Each text column goes through `convert_column`, as streamed values do; then every
    column is cast to the lake table's type; a NULL in a required column is an error,
    never written.
    """
    arrays = []
    for i, column in enumerate(columns):
        if parsed[i]:
            arrays.append(raw.column(i))
            continue
        text = raw.column(i)
        if text.type != pa.binary():
            text = text.cast(pa.binary())
        array, _ = convert_column(
            ArrowValues(text),
            column_type(column),
            where=f"{qualified}.{column.name}",
            allow_unchanged=False,
        )
        arrays.append(array)
    table = pa.Table.from_arrays(arrays, names=[c.name for c in columns])
    return conform(table, arrow_schema, by_field_id=False)
