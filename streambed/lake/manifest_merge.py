"""Bounding the manifests of a snapshot: once a commit would carry too many, merge them.

Every merge-on-read flush adds a data manifest (its new rows) and a deletes manifest (its
position-delete files), and a manifest with a live file is carried into every later
snapshot: without merging, each commit, scan and query of the table reads one more pair of
manifests per flush (docs/benchmarks.md, "Commit cost"). Iceberg's answer, which Java's
merge-append and pyiceberg's (`_ManifestMergeManager`, pyiceberg 0.12) apply to data
manifests, is used here for both kinds, each apart: the manifests of one kind and partition
spec are packed by size into bins of at most `commit.manifest.target-size-bytes`; a bin
with more than one manifest is written as one manifest once the bin holds the manifests of
this commit and at least `commit.manifest.min-count-to-merge` manifests (an older bin
without them merges as soon as it has two). A snapshot so carries fewer than that many
small manifests of each kind.

A merged manifest keeps each entry's sequence numbers: a position delete applies to the
data files whose data sequence number is at most its own, so an entry carried into a
merged manifest is written EXISTING with the data and file sequence numbers it had. Entries
this snapshot adds stay ADDED (they inherit its sequence number), those it removes stay
DELETED, and entries removed by older snapshots are dropped.

The table properties above tune it; streambed's defaults: merging is on, 8 MB, 16.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from pyiceberg.manifest import ManifestEntryStatus, ManifestFile, ManifestWriter
from pyiceberg.table import TableProperties
from pyiceberg.table.update.snapshot import _ManifestMergeManager, _SnapshotProducer
from pyiceberg.utils.properties import property_as_bool, property_as_int

MERGE_COUNT: Final = 16
TARGET_BYTES: Final = 8 * 1024 * 1024

Writer = Callable[[int], ManifestWriter]


class _Merger(_ManifestMergeManager[Any]):
    """pyiceberg's manifest merge, writing merged manifests with `writer` (by spec id), so
    that deletes manifests merge into a deletes manifest."""

    def __init__(self, producer: _SnapshotProducer[Any], writer: Writer) -> None:
        properties = producer._transaction.table_metadata.properties
        super().__init__(
            target_size_bytes=property_as_int(
                properties, TableProperties.MANIFEST_TARGET_SIZE_BYTES, TARGET_BYTES
            )
            or TARGET_BYTES,
            min_count_to_merge=property_as_int(
                properties, TableProperties.MANIFEST_MIN_MERGE_COUNT, MERGE_COUNT
            )
            or MERGE_COUNT,
            merge_enabled=property_as_bool(
                properties, TableProperties.MANIFEST_MERGE_ENABLED, True
            ),
            snapshot_producer=producer,
        )
        self._writer = writer

    def _create_manifest(self, spec_id: int, manifest_bin: list[ManifestFile]) -> ManifestFile:
        producer = self._snapshot_producer
        this = producer.snapshot_id
        with self._writer(spec_id) as writer:
            for manifest in manifest_bin:
                for entry in producer.fetch_manifest_entry(manifest, discard_deleted=False):
                    mine = entry.snapshot_id == this
                    if entry.status == ManifestEntryStatus.ADDED and mine:
                        writer.add(entry)
                    elif entry.status == ManifestEntryStatus.DELETED:
                        if mine:
                            writer.delete(entry)
                    else:
                        writer.existing(entry)
        return writer.to_manifest_file()


def merge_manifests(
    producer: _SnapshotProducer[Any], manifests: list[ManifestFile], writer: Writer
) -> list[ManifestFile]:
    """`manifests` (all of one content, this commit's first), merged as the module says."""
    return _Merger(producer, writer).merge_manifests(manifests)
