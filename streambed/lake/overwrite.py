"""pyiceberg's overwrite, without carrying manifests of removed files into every later snapshot.

An overwrite that removes data files writes their entries, with status DELETED, to a new
manifest of its snapshot. pyiceberg 0.12 keeps that manifest in the manifest list of every
later overwrite: reading it with deleted entries skipped finds nothing to delete, which it
takes to mean "not affected, keep". Every flush that updates or deletes rows removes
files, so the current snapshot gained one such manifest per such flush, forever: each
commit, each scan and each query of the table read all of them, and commits grew slower
without bound (docs/benchmarks.md, "Commit cost"). Other Iceberg writers
(Java, iceberg-go since its fix of the same defect) drop a manifest once it holds no live
file.

`LeanOverwrite` drops them too: an inherited manifest whose counts say it has no added and
no existing files is read, and left out of the new snapshot when it indeed holds no live
entry. Older snapshots keep their own manifest lists, so time travel still reads them.
"""

from __future__ import annotations

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Transaction
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _OverwriteFiles


class LeanOverwrite(_OverwriteFiles):
    """An overwrite snapshot whose manifest list names only manifests with live files."""

    def _existing_manifests(self) -> list[ManifestFile]:
        return [m for m in super()._existing_manifests() if _has_live_files(m, self._io)]


def overwrite(
    tx: Transaction,
    snapshot_properties: dict[str, str],
    producer: type[LeanOverwrite] = LeanOverwrite,
) -> LeanOverwrite:
    """An overwrite of the main branch in `tx` (an append when the table has no snapshot),
    by `producer` (`LeanOverwrite` or a subclass)."""
    first = tx.table_metadata.snapshot_by_name(MAIN_BRANCH) is None
    return producer(
        operation=Operation.APPEND if first else Operation.OVERWRITE,
        transaction=tx,
        io=tx._table.io,
        snapshot_properties=snapshot_properties,
        branch=MAIN_BRANCH,
    )


def _has_live_files(manifest: ManifestFile, io: FileIO) -> bool:
    counts = (manifest.added_files_count, manifest.existing_files_count)
    if None in counts or any(counts):
        return True
    # The counts say "none"; another writer may have left them at zero, so look.
    entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
    return len(entries) > 0
