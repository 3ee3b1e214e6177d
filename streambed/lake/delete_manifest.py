"""An overwrite snapshot that also adds and removes position-delete files.

pyiceberg 0.12 writes only DATA manifests, and its overwrite removes only data files (its
deleted-entry planning skips delete files, and rewriting a manifest that loses an entry
writes it as a DATA manifest). `DeltaOverwrite` keeps `LeanOverwrite` for data files and
handles delete files itself:

- added delete files go to a DELETES manifest of this snapshot (status ADDED), with the
  delete files removed by this snapshot (status DELETED);
- an inherited DELETES manifest that holds a removed delete file is written again, as a
  DELETES manifest, without it (its other entries EXISTING), or left out when nothing of it
  stays;
- the snapshot summary counts both (added/removed delete files and position deletes).

Manifests of both kinds are merged once a snapshot would carry too many
(`streambed.lake.manifest_merge`), each kind apart.

Sequence numbers: the added delete files get this snapshot's sequence number, so they apply
to the data files they name (all older: a delete file only names files already committed),
never to the rows this snapshot appends.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table import TableProperties, Transaction
from pyiceberg.table.snapshots import (
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.utils.properties import property_as_int

from streambed.lake.manifest_merge import merge_manifests
from streambed.lake.overwrite import LeanOverwrite, overwrite


class _DeletesManifestWriter(ManifestWriterV2):
    """A v2 manifest writer whose manifest holds delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class DeltaOverwrite(LeanOverwrite):
    """`LeanOverwrite` plus `add_delete_file` / `remove_delete_file` (module doc)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._added_deletes: list[DataFile] = []
        self._removed_deletes: dict[str, DataFile] = {}
        self._removed_entries: list[ManifestEntry] = []

    def __enter__(self) -> DeltaOverwrite:
        return self

    def add_delete_file(self, delete_file: DataFile) -> DeltaOverwrite:
        self._added_deletes.append(delete_file)
        return self

    def remove_delete_file(self, delete_file: DataFile) -> DeltaOverwrite:
        self._removed_deletes[delete_file.file_path] = delete_file
        return self

    def _deletes_writer(self, spec_id: int | None = None) -> _DeletesManifestWriter:
        metadata = self._transaction.table_metadata
        return _DeletesManifestWriter(
            metadata.spec() if spec_id is None else self.spec(spec_id),
            self.schema(),
            self.new_manifest_output(),
            self._snapshot_id,
            self._compression,
        )

    def _existing_manifests(self) -> list[ManifestFile]:
        kept: list[ManifestFile] = []
        self._removed_entries = []
        for manifest in super()._existing_manifests():
            if manifest.content != ManifestContent.DELETES or not self._removed_deletes:
                kept.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            gone = [e for e in entries if e.data_file.file_path in self._removed_deletes]
            if not gone:
                kept.append(manifest)
                continue
            self._removed_entries += gone
            stay = [e for e in entries if e.data_file.file_path not in self._removed_deletes]
            if stay:
                with self._deletes_writer() as writer:
                    for entry in stay:
                        writer.existing(entry)
                kept.append(writer.to_manifest_file())
        return kept

    def _manifests(self) -> list[ManifestFile]:
        manifests = super()._manifests()  # runs _existing_manifests: _removed_entries known
        missing = set(self._removed_deletes) - {
            e.data_file.file_path for e in self._removed_entries
        }
        if missing:
            raise ValueError(f"delete files to remove are not in the table: {sorted(missing)[:3]}")
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
        if self._added_deletes or self._removed_entries:
            with self._deletes_writer() as writer:
                for delete_file in self._added_deletes:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=delete_file,
                        )
                    )
                for entry in self._removed_entries:
                    writer.delete(entry)
            deletes.insert(0, writer.to_manifest_file())
        return merge_manifests(
            self, data, lambda spec_id: self.new_manifest_writer(self.spec(spec_id))
        ) + merge_manifests(self, deletes, self._deletes_writer)

    def _summary(self, snapshot_properties: dict[str, str] | None = None) -> Summary:
        metadata = self._transaction.table_metadata
        schema = metadata.schema()
        specs = metadata.specs()
        limit = property_as_int(
            metadata.properties,
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT,
        )
        collector = SnapshotSummaryCollector(partition_summary_limit=limit or 0)
        for f in (*self._added_data_files, *self._added_deletes):
            collector.add_file(f, schema=schema, partition_spec=metadata.spec())
        removed: Iterable[DataFile] = (
            *self._deleted_data_files,
            *self._removed_deletes.values(),
        )
        for f in removed:
            collector.remove_file(f, schema=schema, partition_spec=specs[f.spec_id])
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        return update_snapshot_summaries(
            summary=Summary(
                operation=self._operation, **collector.build(), **(snapshot_properties or {})
            ),
            previous_summary=parent.summary if parent is not None else None,
        )


def delta_overwrite(tx: Transaction, snapshot_properties: dict[str, str]) -> DeltaOverwrite:
    """A `DeltaOverwrite` of the main branch in `tx` (an append when the table has none)."""
    made = overwrite(tx, snapshot_properties, DeltaOverwrite)
    assert isinstance(made, DeltaOverwrite)
    return made
