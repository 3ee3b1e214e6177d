"""One table's copy: Spark tasks copy its ctid ranges into Parquet files (a table of at
most `STREAMBED_COPY_LOCAL_BYTES` is copied by threads of streambed's own process,
`copies_here`, `streambed.copy.here`); one Iceberg commit.

Nothing of a copy is visible before its single commit, which replaces every data file of the
lake table (a re-copy replaces the old contents atomically) and records the frontier
`seam - 1`. The files go to `<table>/data/copy-<run id>/`, a directory private to the run:
files of an interrupted copy are found and removed by `discard_uncommitted` (see
`streambed.copy.manager`), and after a commit every file there that the commit does not
reference (left by a task attempt whose result was not used) is removed
(`streambed.copy.orphans`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from streambed.copy.catalog import TableInfo, row_security_message
from streambed.copy.here import copy_here, here_ranges, local_cores, range_threads
from streambed.copy.orphans import remove_orphans
from streambed.copy.ranges import BlockRange, block_ranges
from streambed.copy.task import ERROR_MARK, SCHEMA_MARK, Written, copy_partition
from streambed.core.errors import ConfigError, Kind, SchemaError, SourceError, StreambedError
from streambed.core.failpoints import failpoint, reached
from streambed.core.log import log
from streambed.lake.commit import truncate_commit
from streambed.lake.declared import record_facts
from streambed.lake.evolve import PROP_ATTNUMS
from streambed.lake.files import Footer, current_data_files
from streambed.lake.storage import refused_error
from streambed.lake.tables import arrow_schema, ensure_table
from streambed.source.connection import classify
from streambed.source.snapshot import (
    CopyInterrupted,
    SnapshotExpired,
    connect_failed,
    connection_lost,
    snapshot_expired,
)
from streambed.spark.data_source import encode_schema, filesystem, join_uri

if TYPE_CHECKING:
    from pyspark import StatusTracker
    from pyspark.sql import SparkSession

logger = logging.getLogger("streambed.copy")

JOB_GROUP = "spark.jobGroup.id"
TASKS_END_SECONDS = 60.0
"""How long to wait after a copy's job for its other task attempts (killed speculative
ones) to end before removing what they left."""
KILLED_WORKER_GRACE_SECONDS = 5.0
"""A killed task's Python worker may run on for `spark.python.task.killTimeout` (2 s)."""


class CopyStopped(StreambedError):
    """A Spark copy's job was not submitted: streambed is stopping."""


@dataclass(frozen=True)
class CopyResult:
    qualified: str
    rows: int
    files: int
    bytes: int
    frontier: int
    metadata_location: str
    seconds: float
    copying_seconds: float | None = None
    """From the first task's start to the last task's end (None: no task wrote a file)."""


def output_dir(table: Table, run_id: str) -> str:
    return f"{table.location().rstrip('/')}/data/copy-{run_id}"


def lake_table(catalog: Catalog, info: TableInfo) -> Table:
    """The lake table to copy into: the existing one when its schema still matches the
    source, else a new one (a resync after a schema change replaces it)."""
    # The columns' attnums as of the copy's snapshot, i.e. the seam: a rename that follows in
    # the stream is then known to be one even if the live catalog has moved on by the time
    # the stream's first Relation message for the table is applied. A new table is created
    # with them (one commit fewer per table: a first start of many small tables).
    attnums = json.dumps(dict(info.attnums))
    extra = {PROP_ATTNUMS: attnums} if info.attnums else {}
    extra.update(info.facts.properties())
    try:
        table = ensure_table(catalog, info.relation, info.key, extra)
    except SchemaError:
        catalog.drop_table((info.schema, info.name))
        table = ensure_table(catalog, info.relation, info.key, extra)
    if info.attnums and table.properties.get(PROP_ATTNUMS) != attnums:
        with table.transaction() as tx:
            tx.set_properties({PROP_ATTNUMS: attnums})
        table = table.refresh()
    return record_facts(table, info.facts)


def copies_here(info: TableInfo, local_bytes: int) -> bool:
    """Whether `info` is copied in streambed's own process: not empty, and at most
    `local_bytes` of heap and TOAST (`STREAMBED_COPY_LOCAL_BYTES`)."""
    return info.blocks > 0 and info.stored_bytes <= local_bytes


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
    reader: str | None = None,
    duckdb_memory_limit: str | None = None,
    local_bytes: int = 0,
    local_threads: int | None = None,
    closing: threading.Event | None = None,
) -> CopyResult:
    """Copy `info`'s rows visible in `snapshot` into `table` and commit at `frontier`.

    A table whose heap is empty now was empty in the snapshot too (the snapshot keeps
    VACUUM from removing rows it can see), so it is committed without starting Spark. A
    table of at most `local_bytes` (`copies_here`) is copied in this process, its ranges
    read side by side by `local_threads` threads (None: `here.range_threads()`) the way
    Spark tasks read them (`spark` may then be None): on one machine that is as fast or
    faster, without the Spark job's own cost (docs/initial-copy.md). Once `closing` is set,
    such a copy stops at its ranges' next batch and raises (`here.copy_here`); a Spark copy
    does not submit its job (one already submitted is cancelled by the copy manager).
    """
    started = time.monotonic()
    here = copies_here(info, local_bytes)
    if info.blocks == 0 or (spark is None and not here):
        if info.blocks != 0:
            raise StreambedError(f"{info.qualified}: a non-empty table needs Spark to copy")
        location = truncate_commit(table, added=[], lsn=frontier, loaded=True)
        return CopyResult(info.qualified, 0, 0, 0, frontier, location, time.monotonic() - started)
    if (reader or "duckdb") == "duckdb":
        _check_duckdb_reader()
    out = output_dir(table, run_id)
    threads = local_threads or range_threads()
    if here:
        ranges = here_ranges(info, threads)
    else:
        assert spark is not None
        ranges = block_ranges(info.blocks, slots=task_slots(spark))
    options = {
        **fs_options,
        "url": url,
        "snapshot": snapshot,
        "schema": info.schema,
        "table": info.name,
        "only": "" if info.partitioned else "1",  # `FROM ONLY` (TableInfo.partitioned)
        "row_filter": info.row_filter or "",
        "run_id": run_id,
        "columns": json.dumps(
            [[c.name, c.type_oid, c.type_modifier] for c in info.relation.columns]
        ),
        # Each column's output function: the DuckDB reader's text for what it does not decode.
        "outputs": json.dumps([list(f) for f in info.outputs]),
        "ranges": json.dumps([[r.start, r.end] for r in ranges]),
        "arrow_schema": encode_schema(arrow_schema(table)),
        "output_dir": out,
        # Each task splits its range into files of about 64 MiB of heap (ranges.file_rows).
        "rows_per_block": str(info.estimated_rows / info.blocks),
        "row_bytes": str(info.row_bytes()),  # the DuckDB reader's batch size (duck.batch_rows)
        "table_blocks": str(info.blocks),
        # A one-column key is unique in every file: written without a dictionary.
        "unique": json.dumps(
            [info.relation.columns[i].name for i in info.key.columns]
            if len(info.key.columns) == 1
            else []
        ),
    }
    if batch_bytes is not None:
        options["batch_bytes"] = str(batch_bytes)
    if reader is not None:
        options["reader"] = reader  # `streambed.copy.task`: duckdb (default) or csv
    if duckdb_memory_limit is not None:
        options["duckdb_memory_limit"] = duckdb_memory_limit  # tests: `duck.MEMORY_LIMIT`
    if here:
        written = _copy_here(info, options, ranges, threads, closing)
    else:
        assert spark is not None
        written = _copy_on_spark(spark, info, options, ranges, closing)
    # Range order (the names start with the range's index): a table inserted in key order
    # keeps files whose key bounds follow each other.
    written = sorted(written, key=lambda w: w[0])
    files = [path for path, *_ in written]
    rows = sum(count for _, count, *_ in written)
    size = sum(length for _, _, length, *_ in written)
    copying = max(w[4] for w in written) - min(w[3] for w in written) if written else None
    footers = {w[0]: Footer(w[5], w[2]) for w in written if w[5] is not None}
    failpoint("during_copy")  # files written, nothing committed: the crash tests stop here
    if reached("copy_leftover_file"):
        _plant_leftover(out, files, fs_options)
    location = truncate_commit(table, added=files, lsn=frontier, footers=footers, loaded=True)
    failpoint("after_copy_commit")  # committed; state not updated, leftovers not removed
    if spark is not None and not here:
        wait_for_tasks(spark, job_group(run_id))
    remove_orphans(out, files, fs_options, table=info.qualified)
    return CopyResult(
        info.qualified,
        rows,
        len(files),
        size,
        frontier,
        location,
        time.monotonic() - started,
        copying,
    )


def job_group(run_id: str) -> str:
    """The Spark job group of copy `run_id`'s job."""
    return f"streambed-copy-{run_id}"


def _copy_here(
    info: TableInfo,
    options: Mapping[str, str],
    ranges: list[BlockRange],
    threads: int,
    closing: threading.Event | None,
) -> list[Written]:
    """The table's ranges read and written by `threads` threads of this process, as Spark
    tasks would."""
    try:
        return copy_here(options, ranges, threads, closing=closing)
    except Exception as e:
        raise _failure(info.qualified, e, where="in streambed's process") from None


def _copy_on_spark(
    spark: SparkSession,
    info: TableInfo,
    options: Mapping[str, str],
    ranges: list[BlockRange],
    closing: threading.Event | None,
) -> list[Written]:
    """The table's ranges copied by a Spark job, one task a range; their files. Once
    `closing` is set the job is not submitted (`CopyStopped`)."""
    group = job_group(options["run_id"])  # names the job's tasks for `wait_for_tasks`
    context = spark.sparkContext
    previous = context.getLocalProperty(JOB_GROUP)
    context.setJobGroup(group, f"copy of {info.qualified}")
    try:
        if closing is not None and closing.is_set():
            raise CopyStopped(f"{info.qualified}: streambed is stopping")
        if reached("slow_copy_job"):  # tests: a stop between this check and the job
            log(logger, "failpoint slow_copy_job: waiting before the copy's job", seconds=5)
            time.sleep(5)
        # One partition per range: `parallelize` slices a list of n items into n slices of
        # one. An RDD, not a DataFrame: no query to plan, no Python data source to look up,
        # create and plan in Python workers of their own (docs/initial-copy.md).
        parts = [(i, r.start, r.end) for i, r in enumerate(ranges)]
        rdd = context.parallelize(parts, len(parts)).setName(f"copy of {info.qualified}")
        written: list[Written] = rdd.mapPartitions(partial(copy_partition, options)).collect()
    except CopyStopped:
        raise
    except Exception as e:  # Spark wraps worker errors in its own exception types
        wait_for_tasks(spark, group)  # the caller removes the run's files after this
        raise _failure(info.qualified, e) from None
    finally:
        # Not over the job's own error when Spark's JVM has ended.
        with contextlib.suppress(Exception):
            context.setLocalProperty(JOB_GROUP, previous)  # type: ignore[arg-type]  # None unsets
    return written


def _check_duckdb_reader() -> None:
    """The DuckDB reader's extension is installed here (the tasks need it too): a clear
    error before any task starts."""
    from streambed.server.extensions import extension_path

    try:
        extension_path("postgres")
    except ConfigError as e:
        raise ConfigError(f"{e}; or set STREAMBED_COPY_READER=csv to copy with psql") from None


def wait_for_tasks(spark: SparkSession, group: str) -> None:
    """Wait (bounded) until no task attempt of the job group `group` runs any more: a
    speculative attempt Spark killed may still be writing when the job's result is in.
    Never raises (it runs after the commit); if Spark cannot tell, it does not wait."""
    deadline = time.monotonic() + TASKS_END_SECONDS
    try:
        tracker = spark.sparkContext.statusTracker()
        while True:
            active, failed = _attempts(tracker, group)
            if active == 0 or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
    except Exception as e:  # py4j errors when the Spark context is going away
        logger.warning("cannot tell whether the copy's tasks ended (%s): not waiting", e)
        return
    if failed:
        time.sleep(KILLED_WORKER_GRACE_SECONDS)


def _attempts(tracker: StatusTracker, group: str) -> tuple[int, int]:
    """(running, failed) task attempts of the job group's stages."""
    active = failed = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else []:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                active += stage.numActiveTasks
                failed += stage.numFailedTasks
    return active, failed


def _plant_leftover(out: str, files: list[str], fs_options: Mapping[str, str]) -> None:
    """Failpoint `copy_leftover_file`: a copy of a written file under another attempt's
    name, as a task attempt whose result was not used leaves it."""
    if not files:
        return
    fs, _ = filesystem(out, fs_options)
    name = files[0].rsplit("/", 1)[-1].replace(".parquet", "-leftover.parquet")
    _, source = filesystem(files[0], fs_options)
    _, target = filesystem(join_uri(out, name), fs_options)
    fs.copy_file(source, target)
    logger.warning("failpoint copy_leftover_file: planted %s", target)


def task_slots(spark: SparkSession) -> int:
    """How many tasks Spark runs at once: the cores of a `local[N]` master (its
    `defaultParallelism` is streambed's shuffle setting, 4), else `defaultParallelism`
    (a cluster's total executor cores). A copy's ranges are a multiple of it, so no wave
    of tasks leaves cores idle, and no more: each task costs a psql start, a connection,
    a snapshot import and a scheduling gap."""
    found = local_cores(spark.sparkContext.master or "")
    if found is None:
        return max(1, spark.sparkContext.defaultParallelism)
    return found


def committed(table: Table, run_id: str) -> bool:
    """Whether the copy `run_id` reached its commit (its files are live in the table)."""
    prefix = output_dir(table, run_id) + "/"
    return any(path.startswith(prefix) for path in current_data_files(table))


def discard_uncommitted(
    catalog: Catalog, schema: str, name: str, run_id: str, fs_options: Mapping[str, str]
) -> bool:
    """Remove the files of an interrupted copy; False if the copy had in fact committed
    (then only the files no snapshot of the table references are removed)."""
    try:
        table = catalog.load_table((schema, name))
    except NoSuchTableError:
        return True
    out = output_dir(table, run_id)
    if committed(table, run_id):
        remove_orphans(out, referenced(table, out), fs_options, table=f"{schema}.{name}")
        return False
    fs, path = filesystem(out, fs_options)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        logger.warning("cannot remove files of an interrupted copy at %s: %s", path, e)
    return True


def referenced(table: Table, directory: str) -> set[str]:
    """The data files under `directory` that any snapshot of `table` references."""
    prefix = directory.rstrip("/") + "/"
    found: set[str] = set()
    seen: set[str] = set()
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.data_file.file_path.startswith(prefix):
                    found.add(entry.data_file.file_path)
    return found


def worker_message(error: BaseException) -> str | None:
    """The message a copy worker raised (`copy_failure`), out of Spark's wrapping."""
    text = str(error)
    found = re.search(re.escape(ERROR_MARK) + r" (.*?) :" + re.escape(ERROR_MARK), text, re.S)
    return found.group(1) if found else None


def _failure(qualified: str, error: BaseException, where: str = "on Spark") -> StreambedError:
    message = worker_message(error)
    if message is not None:
        kind = Kind.SOURCE_SETUP
        if message.startswith(f"{SCHEMA_MARK}: "):
            return SchemaError(f"copy of {qualified} failed: {message.split(': ', 1)[1]}")
        if snapshot_expired(message):
            return SnapshotExpired(
                f"copy of {qualified} failed: {message} (the transaction holding the copy's "
                "snapshot ended before this task imported it)",
                kind=kind,
            )
        if connection_lost(message):
            return CopyInterrupted(
                f"copy of {qualified} failed: {message} (a copy task's connection to the "
                "source ended while it read)",
                kind=kind,
            )
        if connect_failed(message):
            # The source is down or restarting (retried with backoff), or refuses the login.
            return SourceError(
                f"copy of {qualified} failed: a copy task could not connect: {message}",
                kind=classify(message),
            )
        if "does not exist" in message:
            message += " (the table was dropped during its copy)"
        elif "permission denied" in message:
            message += f"; GRANT SELECT ON {qualified} to the role, then resync it"
        elif "row-level security" in message:
            message += f" ({row_security_message(qualified)})"
        return SourceError(f"copy of {qualified} failed: {message}", kind=kind)
    refused = refused_error(f"copy of {qualified} failed", str(error))  # a task's OSError
    if refused is not None:
        return refused
    first = " ".join(str(error).split())[:500]
    return StreambedError(f"copy of {qualified} failed {where}: {first}", kind=Kind.STORAGE)
