"""StreamStaging: segments bounded in size, spill files read back one segment at a time."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from streambed.buffer.staging import StreamStaging

XID = 700


class Row:
    """A staged change that can be watched with a weak reference (tuples cannot)."""


def staged(tmp_path: Path, rows: int, segment_bytes: int, subxids: int = 1) -> StreamStaging:
    staging = StreamStaging(XID, tmp_path, segment_bytes)
    for i in range(rows):
        staging.add(1, XID + i % subxids, (str(i).encode(),), 10)
    return staging


def rows_of(staging: StreamStaging) -> list[object]:
    return [row for ops in staging.replay() for row in ops[1]]


def test_a_long_run_of_one_subtransaction_is_cut_into_segments(tmp_path: Path) -> None:
    staging = staged(tmp_path, 100, segment_bytes=50)
    assert [s.bytes for s in staging.segments] == [50] * 20
    assert staging.memory == 1000
    assert rows_of(staging) == [(str(i).encode(),) for i in range(100)]


def test_a_spill_file_is_read_back_one_segment_at_a_time(tmp_path: Path) -> None:
    staging = staged(tmp_path, 100, segment_bytes=50)
    assert staging.spill() == 1000
    staged_again = [(str(i).encode(),) for i in range(100, 130)]
    for row in staged_again:
        staging.add(1, XID, row, 10)
    sizes = [len(ops[1]) for ops in staging.replay()]
    # the rows staged after the spill were spilled too before the replay read the file
    assert sizes == [5] * 26
    assert staging.memory == 0 and not staging.segments
    staging.discard()
    assert not staging.spill_path.exists()


def test_aborted_subtransactions_are_skipped_in_the_spill_file(tmp_path: Path) -> None:
    staging = staged(tmp_path, 12, segment_bytes=1000, subxids=3)
    staging.spill()
    staging.abort_subtransaction(XID + 1)
    assert rows_of(staging) == [(str(i).encode(),) for i in range(12) if i % 3 != 1]


def test_in_memory_segments_are_released_as_they_are_replayed(tmp_path: Path) -> None:
    staging = StreamStaging(XID, tmp_path, segment_bytes=10)
    first = Row()
    staging.add(1, XID, first, 10)  # type: ignore[arg-type]
    staging.add(1, XID, Row(), 10)  # type: ignore[arg-type]
    watch = weakref.ref(first)
    del first
    replay = staging.replay()
    next(replay)
    next(replay)  # the first segment is no longer held by the staging
    gc.collect()
    assert watch() is None
    assert staging.memory == 0
