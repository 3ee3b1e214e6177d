"""Committing written files to a lake table, with the source LSN they cover.

One Iceberg transaction per commit swaps files (overwrite: remove some data files, add
others) and records the table's frontier `streambed.lsn` in the snapshot summary. The
frontier is the source of truth for what the lake holds: on restart, changes with a
commit LSN at or below it are already in the table.

A commit is given the paths of files already written, so a retry replays exactly the
same commit. Replaying a commit that already landed (same LSN, added files live, removed
files gone) returns the current metadata location without committing again.

Each added file's Iceberg metrics come from its Parquet footer: the one its writer
returned (`Footer`: a copy task's), else the one read from storage (on S3, requests per
file). `_check_pyarrow_schema_compatible`, private in pyiceberg (pinned 0.12.0), is the
check pyiceberg runs on a footer it reads; it runs on a returned one too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    ValidationException,
)
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    _check_pyarrow_schema_compatible,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_file_to_data_file,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import DateType, TimestampType, TimestamptzType, TimeType

from streambed.core.errors import Kind, StateError, StorageError, StreambedError
from streambed.lake.delete_manifest import delta_overwrite
from streambed.lake.deletes import LiveFiles, current_files, orphaned, referenced
from streambed.lake.files import Footer
from streambed.lake.transaction import transaction

SUMMARY_LSN: Final = "streambed.lsn"
COMMIT_ATTEMPTS: Final = 4
FOOTER_READERS: Final = 8


def frontier(table: Table) -> int | None:
    """The source LSN the table's current snapshot covers, or None if nothing was committed.

    Walks back through parent snapshots when the latest one (written by another tool,
    e.g. maintenance) does not carry `streambed.lsn`.
    """
    snapshot = table.current_snapshot()
    while snapshot is not None:
        value = snapshot.summary[SUMMARY_LSN] if snapshot.summary is not None else None
        if value is not None:
            return int(value)
        if snapshot.parent_snapshot_id is None:
            return None
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return None


def commit(
    table: Table,
    *,
    removed: Sequence[str],
    added: Sequence[str],
    lsn: int,
    footers: Mapping[str, Footer] | None = None,
    deletes: Sequence[DataFile] = (),
) -> str:
    """Atomically remove data files `removed` and add the written files `added`, at `lsn`
    (`footers`: those of `added` their writers returned), and add the position-delete
    files `deletes` (`streambed.lake.deletes`). Delete files of removed data files leave
    the snapshot with them.

    Returns the new metadata location; `table` is refreshed to it. Raises StateError when
    `lsn` is below the table's frontier, and COMMIT_CONFLICT when a file to remove is no
    longer in the table (someone else changed it; re-plan from the current files).
    """
    return _commit(
        table,
        removed=removed,
        added=added,
        lsn=lsn,
        replace_all=False,
        footers=footers,
        deletes=deletes,
    )


def truncate_commit(
    table: Table,
    *,
    added: Sequence[str],
    lsn: int,
    footers: Mapping[str, Footer] | None = None,
    loaded: bool = False,
) -> str:
    """Replace every current data file by `added` (a source TRUNCATE, then the new rows;
    a copy). `footers`: those of `added` that their writers returned. `loaded`: `table` was
    loaded for this commit (a copy's), so its first attempt does not load it again; if the
    table changed since, that attempt is refused (the catalog asserts the snapshot it
    started from, and pyiceberg's own retry finds files added since) and the next one
    loads the table and checks its frontier."""
    return _commit(
        table,
        removed=(),
        added=added,
        lsn=lsn,
        replace_all=True,
        footers=footers,
        loaded=loaded,
    )


def _commit(
    table: Table,
    *,
    removed: Sequence[str],
    added: Sequence[str],
    lsn: int,
    replace_all: bool,
    footers: Mapping[str, Footer] | None = None,
    loaded: bool = False,
    deletes: Sequence[DataFile] = (),
) -> str:
    name = ".".join(table.name())
    new_files: list[DataFile] | None = None
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        if attempt > 1 or not loaded:
            table.refresh()
        current = frontier(table)
        if current is not None and lsn < current:
            raise StateError(
                f"{name}: refusing to commit at LSN {lsn:X} below the table's frontier "
                f"{current:X}; the lake already holds later changes. Check that only one "
                "streambed writes this catalog"
            )
        files = current_files(table)
        live = files.data
        if not replace_all and _already_committed(files, removed, added, deletes, lsn, current):
            return str(table.metadata_location)
        to_remove = list(live) if replace_all else list(dict.fromkeys(removed))
        missing = [p for p in to_remove if p not in live]
        if missing:
            raise StreambedError(
                f"{name}: {len(missing)} file(s) to replace are no longer in the table "
                f"(e.g. {missing[0]}); another writer changed it since the merge was planned. "
                "Re-plan the merge from the current files",
                kind=Kind.COMMIT_CONFLICT,
            )
        gone = set(to_remove)
        stale = [d for d in deletes if referenced(d) in gone or referenced(d) not in live]
        if stale:
            raise StreambedError(
                f"{name}: a delete file names a data file that is not live after the commit "
                f"({referenced(stale[0])}); re-plan the merge from the current files",
                kind=Kind.COMMIT_CONFLICT,
            )
        if new_files is None:
            new_files = _data_files(table, list(dict.fromkeys(added)), footers or {})
        try:
            with (
                transaction(table) as tx,
                delta_overwrite(tx, {SUMMARY_LSN: str(lsn)}) as overwrite,
            ):
                for path in to_remove:
                    overwrite.delete_data_file(live[path])
                for data_file in new_files:
                    overwrite.append_data_file(data_file)
                for delete_file in deletes:
                    overwrite.add_delete_file(delete_file)
                for delete_file in orphaned(files.deletes, set(live) - gone):
                    overwrite.remove_delete_file(delete_file)
            return str(table.metadata_location)
        except CommitFailedException as e:
            if attempt == COMMIT_ATTEMPTS:
                raise StreambedError(
                    f"{name}: the catalog rejected the commit {attempt} times because the table "
                    f"kept changing ({e}); check that only one streambed writes this catalog",
                    kind=Kind.COMMIT_CONFLICT,
                ) from e
        except ValidationException as e:
            if loaded and attempt == 1:
                continue  # changed since it was loaded: pyiceberg's own retry saw it; load it
            raise StreambedError(
                f"{name}: the commit no longer applies to the table ({e}); another writer "
                "changed it. Re-plan the merge from the current files",
                kind=Kind.COMMIT_CONFLICT,
            ) from e
        except CommitStateUnknownException as e:
            raise StorageError(
                f"{name}: the catalog did not say whether the commit at LSN {lsn:X} landed "
                f"({e}); retrying replays it safely"
            ) from e
    raise AssertionError("unreachable")


def _already_committed(
    files: LiveFiles,
    removed: Sequence[str],
    added: Sequence[str],
    deletes: Sequence[DataFile],
    lsn: int,
    current: int | None,
) -> bool:
    """Whether this very commit landed: the frontier is `lsn`, and every file it adds (data
    and delete files; it must add one to be told apart from the commit before) is live
    while none it removes is."""
    if current != lsn or not (added or deletes):
        return False
    return (
        all(p in files.data for p in added)
        and all(d.file_path in files.deletes for d in deletes)
        and not any(p in files.data for p in removed)
    )


def _data_files(
    table: Table, paths: Sequence[str], footers: Mapping[str, Footer]
) -> list[DataFile]:
    """The DataFiles of `paths`, in order; footers not given are read `FOOTER_READERS` at a
    time (on S3 each is a request: a copy of a large table adds dozens of files)."""
    unread = sum(1 for p in paths if p not in footers)
    if unread <= 1:
        return [_data_file(table, p, footers.get(p)) for p in paths]
    with ThreadPoolExecutor(min(FOOTER_READERS, unread)) as pool:
        return list(pool.map(lambda p: _data_file(table, p, footers.get(p)), paths))


def _data_file(table: Table, path: str, footer: Footer | None) -> DataFile:
    try:
        return data_file(table.io, table.metadata, path, footer)
    except ValueError as e:
        raise StreambedError(
            f"{'.'.join(table.name())}: {path} does not match the table schema: {e}",
            kind=Kind.INTERNAL,
        ) from e
    except OSError as e:
        raise StorageError(f"cannot read the footer of {path}: {e}") from e


def data_file(
    io: FileIO, metadata: TableMetadata, path: str, footer: Footer | None = None
) -> DataFile:
    """The DataFile (with column metrics) of a written Parquet file, from its `footer` as
    its writer returned it, else from the footer read from storage.

    pyiceberg turns each column's min/max into Python objects, which cannot hold dates
    and times outside years 1..9999, infinities or 24:00:00. When a file has such
    values, its date/time columns get no bounds (metrics mode "none" for them): readers
    and `plan_merge` then treat those columns as unbounded, which is always correct.
    """
    try:
        return _to_data_file(io, metadata, path, footer)
    except (OverflowError, ValueError) as e:
        if (
            isinstance(e, ValueError)
            and "out of range" not in str(e)
            and "must be in" not in str(e)
        ):
            raise
    properties = dict(metadata.properties)
    for field in metadata.schema().fields:
        if isinstance(field.field_type, DateType | TimeType | TimestampType | TimestamptzType):
            properties[f"write.metadata.metrics.column.{field.name}"] = "none"
    return _to_data_file(io, metadata.model_copy(update={"properties": properties}), path, footer)


def _to_data_file(
    io: FileIO, metadata: TableMetadata, path: str, footer: Footer | None
) -> DataFile:
    if footer is None:
        return parquet_file_to_data_file(io, metadata, path)
    return footer_data_file(metadata, path, footer)


def footer_data_file(metadata: TableMetadata, path: str, footer: Footer) -> DataFile:
    """What pyiceberg's `parquet_file_to_data_file` makes of a file (the same schema check
    and metrics), from a footer at hand instead of one read from storage."""
    schema = metadata.schema()
    arrow_schema = footer.metadata.schema.to_arrow_schema()
    _check_pyarrow_schema_compatible(schema, arrow_schema, format_version=metadata.format_version)
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer.metadata,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=statistics.partition(metadata.spec(), schema),
        file_size_in_bytes=footer.size,
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
