"""Snapshot expiry: a table keeps the snapshots of a retention window, not every flush's.

Every commit adds a snapshot, and an Iceberg table keeps them all until they are expired.
Each snapshot kept makes the metadata file larger, and every commit writes (and every
query reads) that file whole and copies it a few times (`streambed.lake.transaction`), so
every snapshot kept makes each commit slower. And the data files a flush replaced stay
referenced, so `streambed sweep` can never reclaim them. The sink therefore expires,
after its own commits, the snapshots that are

- older than `Retention.hours` (STREAMBED_SNAPSHOT_RETENTION), or
- beyond the newest `Retention.max_snapshots` (STREAMBED_SNAPSHOT_MAX),

and always keeps the current snapshot, every branch and tag head, and the newest snapshot
that carries `streambed.lsn` (the table's frontier). Expiry only edits the metadata (it is
pyiceberg's `ExpireSnapshots`, on streambed's transaction): older metadata files still
name their snapshots, so a query running on one is not cut off; the files only expired
snapshots referenced become unreferenced and the sweep removes them once they are older
than STREAMBED_SWEEP_MIN_AGE.
Time travel (`streambed.at_time`, `at_lsn`) reaches back as far as the kept snapshots.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Set
from dataclasses import dataclass
from typing import Final

from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.table import Table
from pyiceberg.table.update.snapshot import ExpireSnapshots

from streambed.lake.commit import SUMMARY_LSN
from streambed.lake.transaction import transaction

logger = logging.getLogger("streambed.expire")

MIN_INTERVAL_S: Final = 60.0  # between expiries of one table, unless the count runs over


@dataclass(frozen=True)
class Retention:
    hours: float
    max_snapshots: int

    @property
    def batch(self) -> int:
        """Expire at once when this many snapshots are due, without waiting MIN_INTERVAL_S."""
        return max(1, self.max_snapshots // 10)


def due(
    snapshots: Iterable[tuple[int, int]], keep: Set[int], retention: Retention, now_ms: int
) -> list[int]:
    """The ids to expire among `snapshots` (id, timestamp in ms), newest kept first.

    `keep` are never expired and count first towards `max_snapshots`."""
    cutoff = now_ms - int(retention.hours * 3_600_000)
    ordered = sorted(snapshots, key=lambda s: (s[1], s[0]), reverse=True)
    kept = sum(1 for snapshot_id, _ in ordered if snapshot_id in keep)
    out = []
    for snapshot_id, timestamp_ms in ordered:
        if snapshot_id in keep:
            continue
        if timestamp_ms >= cutoff and kept < retention.max_snapshots:
            kept += 1
        else:
            out.append(snapshot_id)
    return out


def protected(table: Table) -> set[int]:
    """The current snapshot, branch and tag heads, and the newest with a streambed frontier."""
    metadata = table.metadata
    keep = {ref.snapshot_id for ref in metadata.refs.values()}
    if metadata.current_snapshot_id is not None:
        keep.add(metadata.current_snapshot_id)
    with_lsn = [s for s in metadata.snapshots if s.summary and s.summary.get(SUMMARY_LSN)]
    if with_lsn:
        keep.add(max(with_lsn, key=lambda s: (s.timestamp_ms, s.sequence_number or 0)).snapshot_id)
    return keep


def expire(table: Table, retention: Retention, now: dt.datetime | None = None) -> int:
    """Expire the snapshots of `table` that `retention` no longer keeps; how many went.

    A failure (the catalog rejected the commit, storage trouble) is logged and leaves the
    snapshots for the next attempt: expiry never stops the pipeline."""
    moment = now or dt.datetime.now(dt.UTC)
    snapshots = [(s.snapshot_id, s.timestamp_ms) for s in table.metadata.snapshots]
    ids = due(snapshots, protected(table), retention, int(moment.timestamp() * 1000))
    if not ids:
        return 0
    try:
        ExpireSnapshots(transaction(table, autocommit=True)).by_ids(ids).commit()
    except (CommitFailedException, CommitStateUnknownException, OSError, ValueError) as e:
        logger.warning(
            "expiring %d snapshot(s) of %s failed, tried again later: %s",
            len(ids),
            ".".join(table.name()),
            e,
        )
        return 0
    logger.debug("expired %d snapshot(s) of %s", len(ids), ".".join(table.name()))
    return len(ids)
