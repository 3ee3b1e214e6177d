"""Where a merge runs: in this process only when both its stored bytes and the rows it
would hold in memory are small (`streambed.lake.merge.local.merges_here`)."""

from __future__ import annotations

import pyarrow as pa

from streambed.lake.merge.local import IN_MEMORY_FACTOR, merges_here

MiB = 1024 * 1024
WIDE = pa.table({"id": pa.array(range(100), pa.int64()), "note": ["x" * 200] * 100})


def test_small_rewrite_runs_here() -> None:
    assert merges_here(1 * MiB, 10_000, WIDE, 64 * MiB)


def test_stored_bytes_over_the_line_go_to_spark() -> None:
    assert not merges_here(64 * MiB, 10, WIDE, 64 * MiB)


def test_well_compressed_rows_go_to_spark() -> None:
    # 1 MiB stored, but a million rows of ~200 bytes each: about 200 MiB in memory
    row = WIDE.nbytes / WIDE.num_rows
    rows = int(IN_MEMORY_FACTOR * 4 * MiB / row) + 1
    assert not merges_here(1 * MiB, rows, WIDE, 4 * MiB)
    assert merges_here(1 * MiB, rows // 2, WIDE, 4 * MiB)


def test_deletes_only_estimate_the_width_from_the_schema() -> None:
    empty = WIDE.slice(0, 0)  # int64 (8 bytes) + a string (32): 40 bytes a row
    limit = 1 * MiB
    fits = IN_MEMORY_FACTOR * limit // 40
    assert merges_here(0, fits, empty, limit)
    assert not merges_here(0, fits + 1, empty, limit)


def test_zero_sends_every_merge_to_spark() -> None:
    assert not merges_here(1, 1, WIDE.slice(0, 1), 0)
