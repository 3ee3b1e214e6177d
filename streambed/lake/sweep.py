"""`streambed sweep`: delete the data and metadata files of the lake no reader can reach.

Files that reach storage but never a commit: a merge or a copy whose process died before
its commit, a copy task attempt that Spark retried or killed after the copy's own sweep
(`streambed.copy.orphans`), the parts of a large transaction that was never committed.
They cost storage, never correctness: no snapshot names them, so no reader sees them.

For each table in the state store, and each lake table streambed made for a table it has
since forgotten (no longer streamed, or dropped in the source: the lake table is kept, and
the state store lists it under `forgotten` until it is streamed again), the sweep lists
`<table location>/data/` and deletes each file that is (1) referenced by no snapshot in
the table's metadata (pyiceberg's `inspect.all_files`: the files of every snapshot, so
older snapshots stay readable; a snapshot expired by another engine no longer protects
its files), (2) older than
`older_than` seconds by its modification time, and (3) not under the output directory of
a copy in progress (the state store's `copies`: a long copy commits its files only at the
end). The files of the current snapshot of the metadata the state store still serves
count as referenced too (its latest watermark, and each table's frontier): after a resync
that changed the schema, the table is created again at the same location and the old one
is served until the copy commits.

The age is the guard for files a running `streambed run` has written and is about to
commit; it defaults to three days, Iceberg's own default for removing orphan files.
`streambed run` itself sweeps every `STREAMBED_SWEEP_INTERVAL` hours (`Sweeper`), keeping
files younger than `STREAMBED_SWEEP_MIN_AGE`.

`<table location>/metadata/` is swept by the same rules (`streambed.lake.sweep_metadata`):
the manifest lists and manifests of expired snapshots, and metadata files no longer in a
table's metadata log, go once they are old enough; only files named as Iceberg names its
metadata are deleted, and nothing when the current metadata file is not in the listing.

pyiceberg 0.12 lists a table's files but has no orphan-file removal (Spark's Iceberg
runtime has one, `remove_orphan_files`, but streambed's Spark runs without the Iceberg
jars), so the listing, the comparison and the deletes are written here.

It refuses to delete anything in a table when a file of the current snapshot under `data/`,
or the current metadata file, is missing from the listing (the names are then not compared
in the same form, or the table has lost a file, which an operator must look at first).
"Current" is as loaded before the listings start: a table that commits while it is listed
(a busy one, at every flush) is not refused for the files that commit added, which the
listing may lack: refusing it would put the running sweep off by a whole
`STREAMBED_SWEEP_INTERVAL`.

Nor does it delete anything in tables that share a directory (`shared_directories`):
`User` and `user` on a filesystem that does not tell them apart, placed before
`streambed.lake.locations.separate` placed such tables apart. Each table's sweep would
delete the other's files, metadata files included.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from streambed.core.errors import StorageError
from streambed.core.log import log
from streambed.core.names import qualified as watermark_key
from streambed.lake.sweep_metadata import is_metadata_file, metadata_references
from streambed.storage.uris import split_uri

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from streambed.core.config import Settings

logger = logging.getLogger("streambed.sweep")


class SweepRefused(StorageError):
    """A table's listing and its current snapshot do not match up; nothing is deleted."""


@dataclass(frozen=True)
class Listed:
    """A file found under a table's data directory."""

    path: str  # the filesystem's path (no scheme)
    modified: float  # seconds since the epoch
    size: int


@dataclass(frozen=True)
class TableSweep:
    """What the sweep did (or, dry, would do) in one table."""

    table: str
    removed: list[str]  # data files
    removed_bytes: int  # data and metadata files
    kept: int  # files left: referenced, too young, or a running copy's
    refused: str | None = None  # why nothing was deleted
    removed_metadata: list[str] = field(default_factory=list)  # metadata files


def unreferenced(
    listed: Iterable[Listed],
    base: str,
    *,
    referenced: Iterable[str],
    current: Iterable[str],
    running: Iterable[str] = (),
    before: float,
) -> list[Listed]:
    """The files of `listed` (under `base`, a data directory's filesystem path) that may
    be deleted: in no snapshot (`referenced`: file URIs of every snapshot), modified before
    `before`, and not under a directory of `running` (URIs). URIs are compared by their
    filesystem path (`storage.split_uri`: `s3://b/k`, `s3a://b/k` and `s3n://b/k` are
    `b/k`; `file:///p` is `/p`). Raises `SweepRefused` when a file of `current` (the
    current snapshot's URIs) under `base` is not listed."""
    prefix = base.rstrip("/") + "/"

    def relative(uri: str) -> str | None:
        try:
            _, path = split_uri(uri)
        except StorageError:  # a scheme streambed does not store to: not in this listing
            return None
        return path[len(prefix) :] if path.startswith(prefix) else None

    present: dict[str, Listed] = {}
    for f in listed:
        if not f.path.startswith(prefix):
            raise SweepRefused(f"listed file {f.path} is not under {base}")
        present[f.path[len(prefix) :]] = f
    keep: set[str] = set()
    for uri in current:
        name = relative(uri)
        if name is not None and name not in present:
            raise SweepRefused(
                f"{uri} is in the table's current snapshot but not in the listing of "
                f"{base}; nothing deleted (check the storage settings, and the file)"
            )
        if name is not None:
            keep.add(name)
    keep.update(name for uri in referenced if (name := relative(uri)) is not None)
    busy = [name.rstrip("/") + "/" for uri in running if (name := relative(uri)) is not None]
    return [
        f
        for name, f in sorted(present.items())
        if name not in keep and f.modified < before and not any(name.startswith(b) for b in busy)
    ]


def referenced_files(table: Table, served: Iterable[Table] = ()) -> set[str]:
    """The data and delete file URIs of every snapshot (the current one's among them), from
    pyiceberg's metadata tables (each manifest read once). `served`: the metadata the
    state store still serves (`served_tables`), whose current snapshot's files count as
    referenced too: a table dropped and created again at the same location (a resync after
    a schema change) is served from its old metadata until the new copy commits."""
    everything: set[str] = set()
    if table.metadata.snapshots:
        everything.update(table.inspect.all_files().column("file_path").to_pylist())
    for old in served:
        everything.update(current_files(old))  # what is served of it: its current files
    return everything


def current_files(table: Table) -> set[str]:
    """The data and delete file URIs of `table`'s current snapshot."""
    if table.current_snapshot() is None:
        return set()
    return set(table.inspect.files().column("file_path").to_pylist())


def served_tables(table: Table, pinned: Iterable[str]) -> list[Table]:
    """The metadata at each of `pinned` (locations the state store still serves) other
    than `table`'s own. Raises `SweepRefused` when one cannot be read."""
    from pyiceberg.table import StaticTable

    tables: list[Table] = []
    for location in sorted(set(pinned) - {table.metadata_location}):
        try:
            tables.append(StaticTable.from_metadata(location, properties=table.io.properties))
        except (OSError, ValueError) as e:
            raise SweepRefused(
                f"cannot read {location}, which the state store still serves ({e}); nothing deleted"
            ) from None
    return tables


def list_files(
    directory: str, options: Mapping[str, str]
) -> tuple[pafs.FileSystem, str, list[Listed]]:
    """The filesystem, its path for `directory`, and every file under it."""
    from streambed.spark.data_source import filesystem

    fs, base = filesystem(directory, options)
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    files = [
        Listed(i.path, _seconds(i.mtime), int(i.size or 0))
        for i in infos
        if i.type == pafs.FileType.File
    ]
    return fs, base, files


def _seconds(mtime: dt.datetime | None) -> float:
    if mtime is None:
        return float("inf")  # unknown age: never old enough
    if mtime.tzinfo is None:
        mtime = mtime.replace(tzinfo=dt.UTC)
    return mtime.timestamp()


def sweep_table(
    table: Table,
    name: str,
    options: Mapping[str, str],
    *,
    before: float,
    running: Iterable[str] = (),
    pinned: Iterable[str] = (),
    dry_run: bool = False,
) -> TableSweep:
    """Sweep one table's data and metadata directories (see the module doc). `table` is
    as loaded before the sweep: the listings must hold its current metadata file and the
    files of its current snapshot. What commits while they run adds files a listing may
    miss; those are not deleted (not listed), and what the new metadata references is
    kept (`table` is refreshed after the listings)."""
    location = table.location().rstrip("/")
    files: list[Listed] = []
    metadata: list[Listed] = []
    try:
        first_location = str(table.metadata_location)
        first_current = current_files(table)
        fs, base, files = list_files(f"{location}/data", options)
        _, metadata_base, metadata = list_files(f"{location}/metadata", options)
        table = table.refresh()  # after the listings: a file committed meanwhile is referenced
        served = served_tables(table, pinned)
        everything = referenced_files(table, served)
        doomed = unreferenced(
            files,
            base,
            referenced=everything,
            current=first_current,
            running=running,
            before=before,
        )
        doomed_metadata = [
            f
            for f in unreferenced(
                metadata,
                metadata_base,
                referenced=metadata_references([table, *served]),
                current=[first_location],
                before=before,
            )
            if is_metadata_file(f.path)
        ]
    except (SweepRefused, OSError) as e:  # OSError: the store or the catalog failed
        reason = " ".join(str(e).split())
        log(logger, "sweep refused", logging.WARNING, table=name, error=reason)
        return TableSweep(name, [], 0, len(files) + len(metadata), refused=reason)
    removed, size = _delete(fs, doomed, dry_run)
    removed_metadata, metadata_size = _delete(fs, doomed_metadata, dry_run)
    if removed or removed_metadata:
        message = "unreferenced files found" if dry_run else "unreferenced files removed"
        log(
            logger,
            message,
            table=name,
            files=len(removed),
            metadata_files=len(removed_metadata),
            bytes=size + metadata_size,
        )
    kept = len(files) + len(metadata) - len(removed) - len(removed_metadata)
    return TableSweep(name, removed, size + metadata_size, kept, removed_metadata=removed_metadata)


def _delete(fs: pafs.FileSystem, doomed: list[Listed], dry_run: bool) -> tuple[list[str], int]:
    """Delete (`dry_run`: not) each of `doomed`: (the paths gone, their bytes)."""
    removed: list[str] = []
    size = 0
    for f in doomed:
        if not dry_run:
            try:
                fs.delete_file(f.path)
            except FileNotFoundError:
                continue
        removed.append(f.path)
        size += f.size
    return removed, size


def sweep(
    settings: Settings,
    *,
    older_than: float | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> list[TableSweep]:
    """Sweep every table the state store knows of: files older than `older_than` seconds
    (None: `STREAMBED_SWEEP_MIN_AGE`) as of `now` (None: the time now). A table that cannot
    be swept (unreadable metadata, a failed listing, `SweepRefused`) is reported in its
    result and left alone; the others are swept."""
    from pyiceberg.exceptions import NoSuchTableError

    from streambed.lake.catalog import open_catalog
    from streambed.spark.data_source import fs_options
    from streambed.state.store import StateStore

    if older_than is None:
        older_than = settings.sweep_min_age * 3600
    before = (time.time() if now is None else now) - older_than
    options = fs_options(settings)
    if not settings.state_path.exists():
        return []  # nothing replicated here yet
    state = StateStore(settings.state_path)
    try:
        tables = [(t.schema, t.name, t.metadata_location) for t in state.tables()]
        forgotten = set(state.forgotten()) - {(schema, name) for schema, name, _ in tables}
        tables += [(schema, name, None) for schema, name in sorted(forgotten)]
        copies: dict[tuple[str, str], list[str]] = {}
        for schema, name, _, output_dir, _ in state.copies():
            copies.setdefault((schema, name), []).append(output_dir)
        mark = state.latest_watermark()
        served = dict(mark.tables) if mark is not None else {}
    finally:
        state.close()
    catalog: Catalog = open_catalog(settings)
    results = []
    loaded: list[tuple[str, str, str | None, Table]] = []
    for schema, name, metadata_location in tables:
        try:
            loaded.append((schema, name, metadata_location, catalog.load_table((schema, name))))
        except NoSuchTableError:
            if (schema, name) in forgotten and not dry_run:
                _drop_forgotten(settings, schema, name)  # its lake table was dropped
        except OSError as e:  # its metadata cannot be read: this table is not swept
            reason = f"cannot load the table: {' '.join(str(e).split())}"
            results.append(_refused(f"{schema}.{name}", reason))
    shared = shared_directories({(s, n): t.location() for s, n, _, t in loaded})
    for schema, name, metadata_location, table in loaded:
        qualified, key = f"{schema}.{name}", watermark_key(schema, name)
        if (schema, name) in shared:
            results.append(_refused(qualified, shared[(schema, name)]))
            continue
        results.append(
            sweep_table(
                table,
                qualified,
                options,
                before=before,
                running=copies.get((schema, name), []),
                pinned=[loc for loc in (metadata_location, served.get(key)) if loc],
                dry_run=dry_run,
            )
        )
    return results


def _refused(table: str, reason: str) -> TableSweep:
    log(logger, "sweep refused", logging.WARNING, table=table, error=reason)
    return TableSweep(table, [], 0, 0, refused=reason)


def shared_directories(
    locations: Mapping[tuple[str, str], str],
) -> dict[tuple[str, str], str]:
    """For each table of `locations` ((schema, name) → lake table location) whose directory
    is also another's, why it is not swept. Local directories are compared as the
    filesystem resolves them (`User` and `user` are one on macOS), S3 keys as written."""
    groups: dict[object, list[tuple[str, str]]] = {}
    for table, location in locations.items():
        scheme, path = split_uri(location)
        key: object = (scheme, path.rstrip("/"))
        if scheme == "file":
            with contextlib.suppress(OSError):  # missing: nothing in it to delete
                info = os.stat(path)
                key = (info.st_dev, info.st_ino)
        groups.setdefault(key, []).append(table)
    reasons = {}
    for tables in groups.values():
        for table in tables if len(tables) > 1 else ():
            others = ", ".join(f"{s}.{n}" for s, n in tables if (s, n) != table)
            reasons[table] = (
                f"its lake table's directory {locations[table]} is also the lake table "
                f"directory of {others} (a filesystem that does not tell their names apart, "
                "or tables placed before 2026-11-30): each one's sweep would delete the "
                "other's files, so neither is swept. This costs storage, never data"
            )
    return reasons


def _drop_forgotten(settings: Settings, schema: str, name: str) -> None:
    from streambed.state.store import StateStore

    with StateStore(settings.state_path) as state:
        state.drop_forgotten(schema, name)


FIRST_SWEEP_SECONDS = 600.0
"""A running streambed's first sweep comes this long after its start (or one interval,
if shorter): not during the start-up and the first copies."""


class Sweeper:
    """`streambed run`'s periodic sweep (`STREAMBED_SWEEP_INTERVAL`, files older than
    `STREAMBED_SWEEP_MIN_AGE`), on a thread of its own. A failed sweep is logged and tried
    again at the next interval: leftovers cost storage, never correctness."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.interval = settings.sweep_interval * 3600
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="streambed-sweep", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        wait = min(self.interval, FIRST_SWEEP_SECONDS)
        while not self._stop.wait(wait):
            wait = self.interval
            try:
                results = sweep(self.settings)
            except Exception as e:  # storage or catalog trouble: try again next time
                log(logger, "sweep failed", logging.WARNING, error=" ".join(str(e).split()))
                continue
            log(
                logger,
                "sweep done",
                tables=len(results),
                removed=sum(len(r.removed) for r in results),
                removed_metadata=sum(len(r.removed_metadata) for r in results),
                refused=sum(r.refused is not None for r in results),
            )
