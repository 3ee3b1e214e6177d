"""One table's copy: Spark reads its ctid ranges and writes Parquet; one Iceberg commit.

Nothing of a copy is visible before its single commit, which replaces every data file of the
lake table (a re-copy replaces the old contents atomically) and records the frontier
`seam - 1`. The files go to `<table>/data/copy-<run id>/`, so files of an interrupted copy
are found and removed by `discard_uncommitted` (see `streambed.copy.manager`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from streambed.copy.catalog import TableInfo
from streambed.copy.datasource import (
    ERROR_MARK,
    READER,
    WRITER,
    CopyParquetSink,
    PgCopySource,
)
from streambed.copy.ranges import block_ranges
from streambed.errors import Kind, SchemaError, SourceError, StreambedError
from streambed.failpoints import failpoint
from streambed.lake.commit import truncate_commit
from streambed.lake.files import current_data_files
from streambed.lake.tables import arrow_schema, ensure_table
from streambed.merge.executor import spark_schema
from streambed.merge.pyarrow_source import encode_schema, filesystem, read_manifest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger("streambed.copy")

_register_lock = threading.Lock()


@dataclass(frozen=True)
class CopyResult:
    qualified: str
    rows: int
    files: int
    frontier: int
    metadata_location: str
    seconds: float


def output_dir(table: Table, run_id: str) -> str:
    return f"{table.location().rstrip('/')}/data/copy-{run_id}"


def lake_table(catalog: Catalog, info: TableInfo) -> Table:
    """The lake table to copy into: the existing one when its schema still matches the
    source, else a new one (a resync after a schema change replaces it)."""
    try:
        return ensure_table(catalog, info.relation, info.key)
    except SchemaError:
        catalog.drop_table((info.schema, info.name))
        return ensure_table(catalog, info.relation, info.key)


def copy_table(
    spark: SparkSession | None,
    table: Table,
    info: TableInfo,
    *,
    url: str,
    snapshot: str,
    frontier: int,
    run_id: str,
    fs_options: Mapping[str, str],
    batch_bytes: int | None = None,
) -> CopyResult:
    """Copy `info`'s rows visible in `snapshot` into `table` and commit at `frontier`.

    A table whose heap is empty now was empty in the snapshot too (the snapshot keeps
    VACUUM from removing rows it can see), so it is committed without starting Spark.
    """
    started = time.monotonic()
    if info.blocks == 0 or spark is None:
        if info.blocks != 0:
            raise StreambedError(f"{info.qualified}: a non-empty table needs Spark to copy")
        location = truncate_commit(table, added=[], lsn=frontier)
        return CopyResult(info.qualified, 0, 0, frontier, location, time.monotonic() - started)
    _register(spark)
    schema = arrow_schema(table)
    out = output_dir(table, run_id)
    parallelism = max(1, spark.sparkContext.defaultParallelism)
    ranges = block_ranges(info.blocks, min_partitions=parallelism)
    options = {
        "url": url,
        "snapshot": snapshot,
        "schema": info.schema,
        "table": info.name,
        "run_id": run_id,
        "columns": json.dumps(
            [[c.name, c.type_oid, c.type_modifier] for c in info.relation.columns]
        ),
        "ranges": json.dumps([[r.start, r.end] for r in ranges]),
        "arrow_schema": encode_schema(schema),
    }
    if batch_bytes is not None:
        options["batch_bytes"] = str(batch_bytes)
    try:
        frame = (
            spark.read.format(READER)
            .schema(spark_schema(schema, nullable=False))
            .options(**options)
            .load()
        )
        if _native(out, schema):
            files = _write_native(frame, out, run_id)
        else:
            (
                frame.write.format(WRITER)
                .mode("append")
                .option("output_dir", out)
                .option("run_id", run_id)
                .option("arrow_schema", encode_schema(schema))
                .options(**fs_options)
                .save()
            )
            files = read_manifest(out, run_id, fs_options)
    except Exception as e:  # Spark wraps worker errors in its own exception types
        raise _failure(info.qualified, e) from None
    failpoint("during_copy")  # files written, nothing committed: the crash tests stop here
    location = truncate_commit(table, added=files, lsn=frontier)
    snapshot_ = table.current_snapshot()
    summary = snapshot_.summary if snapshot_ is not None else None
    rows = int(summary.get("total-records") or 0) if summary is not None else 0
    return CopyResult(
        info.qualified, rows, len(files), frontier, location, time.monotonic() - started
    )


def committed(table: Table, run_id: str) -> bool:
    """Whether the copy `run_id` reached its commit (its files are live in the table)."""
    prefix = output_dir(table, run_id) + "/"
    return any(path.startswith(prefix) for path in current_data_files(table))


def discard_uncommitted(
    catalog: Catalog, schema: str, name: str, run_id: str, fs_options: Mapping[str, str]
) -> bool:
    """Remove the files of an interrupted copy; False if the copy had in fact committed."""
    try:
        table = catalog.load_table((schema, name))
    except NoSuchTableError:
        return True
    if committed(table, run_id):
        return False
    fs, path = filesystem(output_dir(table, run_id), fs_options)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        logger.warning("cannot remove files of an interrupted copy at %s: %s", path, e)
    return True


def worker_message(error: BaseException) -> str | None:
    """The message a copy worker raised (`copy_failure`), out of Spark's wrapping."""
    text = str(error)
    found = re.search(re.escape(ERROR_MARK) + r" (.*?) :" + re.escape(ERROR_MARK), text, re.S)
    return found.group(1) if found else None


def _failure(qualified: str, error: BaseException) -> StreambedError:
    message = worker_message(error)
    if message is not None:
        kind = Kind.SOURCE_SETUP
        if "does not exist" in message:
            message += " (the table was dropped during its copy)"
        elif "permission denied" in message:
            message += f"; GRANT SELECT ON {qualified} to the role, then resync it"
        return SourceError(f"copy of {qualified} failed: {message}", kind=kind)
    first = " ".join(str(error).split())[:500]
    return StreambedError(f"copy of {qualified} failed on Spark: {first}", kind=Kind.STORAGE)


def _register(spark: SparkSession) -> None:
    # Registered for every copy: a cache keyed by the session object missed sessions that
    # were stopped and started again (DATA_SOURCE_NOT_FOUND); registering again is cheap.
    with _register_lock:
        spark.dataSource.register(PgCopySource)
        spark.dataSource.register(CopyParquetSink)
    # Copies run in worker threads; `DataFrameWriter.save` looks Python data sources up in
    # the JVM thread's *active* session, which a new thread does not have.
    jvm = spark._jvm  # no public API sets the active session
    if jvm is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


def _native(output: str, schema: pa.Schema) -> bool:
    """Spark's own Parquet writer is used for a local warehouse when it writes this schema
    exactly (flat columns; no fixed-size binary, time or large types); it skips one
    Arrow round trip through a Python worker. S3 always goes through the pyarrow writer."""
    if output.startswith("s3://"):
        return False
    for f in schema:
        t = f.type
        if pa.types.is_nested(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_time(t):
            return False
        if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            return False
    return True


def _write_native(frame: DataFrame, output: str, run_id: str) -> list[str]:
    """Write with Spark's Parquet writer into a staging directory, then move the files into
    `output` (unique names); nothing is left in `output` if the job fails."""
    local = output.removeprefix("file://")
    out = Path(local)
    staging = out / f"_staging-{run_id}"
    try:
        frame.write.option("compression", "zstd").parquet(str(staging))
        written: list[str] = []
        for part in sorted(staging.glob("part-*.parquet")):
            if pq.read_metadata(part).num_rows == 0:
                continue
            target = out / f"{run_id}-{len(written):05d}.parquet"
            os.replace(part, target)
            written.append(target.as_uri() if output.startswith("file://") else str(target))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written
