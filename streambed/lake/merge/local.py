"""Whether a merge runs in this process or on Spark (docs/architecture.md, "Where a merge
runs"): a pure function of the rewrite's size and the flush's rows."""

from __future__ import annotations

import pyarrow as pa

# The in-process merge may hold this many times STREAMBED_MERGE_LOCAL_BYTES of rows in memory.
IN_MEMORY_FACTOR = 4


def merges_here(rewrite_bytes: int, rewrite_rows: int, rows: pa.Table, limit: int) -> bool:
    """Whether a merge runs in this process: the files it rewrites (stored bytes) plus its
    new rows within `limit` (STREAMBED_MERGE_LOCAL_BYTES), and the rows it holds in memory
    (estimated from the new rows' width, or the schema's) within `IN_MEMORY_FACTOR` times
    that, so a file of well-compressed rows is not unpacked into gigabytes here."""
    new_bytes = int(rows.nbytes)
    if rewrite_bytes + new_bytes > limit:
        return False
    return rewrite_rows * _row_bytes(rows) + new_bytes <= IN_MEMORY_FACTOR * limit


def _row_bytes(rows: pa.Table) -> float:
    """Arrow bytes of one row: the new rows' average, or an estimate from the schema (fixed
    widths; 32 bytes for a variable-width value) when there are none."""
    if rows.num_rows:
        return int(rows.nbytes) / int(rows.num_rows)
    width = 0
    for column in rows.schema:
        try:
            width += max(column.type.bit_width // 8, 1)
        except ValueError:  # variable width: strings, binaries, lists, decimals as text
            width += 32
    return float(width)
