"""The metadata half of the sweep: which files under `<table>/metadata/` a reader can
still reach, and which names the sweep may delete at all.

Every commit writes a metadata file, a manifest list and one or more manifests. Lake
tables delete their metadata files beyond the last `tables.METADATA_VERSIONS` as they
commit, and snapshot expiry drops snapshots from the metadata, but nothing deletes the
manifest lists and manifests of expired snapshots, the metadata files a failed delete left,
or those of a table dropped and created again at the same location (a resync after a
schema change). The sweep does, by the same rules as for data files (unreferenced, old
enough): reachable are the metadata file itself, those in its metadata log, and each
snapshot's manifest list, manifests and statistics files, from the table's current
metadata and from every metadata the state store still serves.

Only names Iceberg writers give these files are deleted (`METADATA_FILE`); anything else
in the directory (a `version-hint.text`, a file another tool keeps there) is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyiceberg.table import Table

METADATA_FILE: Final = re.compile(r".+\.metadata\.json(?:\.gz)?|snap-.+\.avro|.+-m\d+\.avro")
"""Metadata files (`00012-<uuid>.metadata.json`), manifest lists (`snap-<id>-<n>-<uuid>.avro`)
and manifests (`<uuid>-m<n>.avro`), as pyiceberg and Iceberg's Java library name them."""


def is_metadata_file(path: str) -> bool:
    """Whether the file at `path` is named as Iceberg names metadata it writes."""
    return METADATA_FILE.fullmatch(path.rsplit("/", 1)[-1]) is not None


def metadata_references(tables: Iterable[Table]) -> set[str]:
    """URIs of the metadata files reachable from each of `tables`' metadata (each manifest
    list read once)."""
    found: set[str] = set()
    read: set[str] = set()
    for table in tables:
        metadata = table.metadata
        if table.metadata_location:
            found.add(table.metadata_location)
        found.update(entry.metadata_file for entry in metadata.metadata_log)
        found.update(f.statistics_path for f in metadata.statistics)
        found.update(f.statistics_path for f in metadata.partition_statistics)
        for snapshot in metadata.snapshots:
            found.add(snapshot.manifest_list)
            if snapshot.manifest_list in read:
                continue
            read.add(snapshot.manifest_list)
            found.update(m.manifest_path for m in snapshot.manifests(table.io))
    return found
