"""ctid block ranges of a table and the COPY statement that reads one of them. Pure.

A partition is a half-open range of heap blocks `[start, end)`; the last one has no end, so
rows on blocks added after the size was read are still copied (under the snapshot they are
invisible anyway, but the block count may be an old estimate). PG14+ runs
`ctid >= '(a,0)' AND ctid < '(b,0)'` as a TID range scan: each partition reads only its blocks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from psycopg import sql

BLOCKS_PER_PARTITION: Final = 131072
"""1 GiB of heap (8 kB blocks) per partition. Each task after a slot's first waits for Spark
to hand it over, so few large partitions (a 10M-row pgbench table in one wave on two cores)
copy sooner than many small ones. Memory does not grow with it: a task streams its range."""

FILE_BLOCKS: Final = 8192
"""A copy task rolls its Parquet files at about the rows of 64 MiB of heap, so the files a
later copy-on-write merge rewrites stay small whatever the partition's size."""


@dataclass(frozen=True)
class BlockRange:
    start: int
    end: int | None  # exclusive; None: to the end of the table

    def predicate(self) -> str:
        low = f"ctid >= '({self.start},0)'::tid"
        if self.end is None:
            return low
        return f"{low} AND ctid < '({self.end},0)'::tid"


def block_ranges(
    blocks: int, slots: int = 1, blocks_per_partition: int = BLOCKS_PER_PARTITION
) -> list[BlockRange]:
    """Split `blocks` heap blocks into ranges of at most `blocks_per_partition` blocks, as
    many as a multiple of `slots` (the tasks Spark runs at once: every wave of tasks is
    full), fewer only when the table has fewer blocks. Sizes differ by at most one block.
    The ranges tile [0, ∞): the first starts at 0, each starts where the previous ends,
    the last is open."""
    if blocks_per_partition < 1:
        raise ValueError("blocks_per_partition must be positive")
    blocks = max(0, blocks)
    slots = max(1, slots)
    needed = -(-blocks // blocks_per_partition)
    count = max(1, min(-(-needed // slots) * slots, blocks))
    starts = [i * blocks // count for i in range(count)]
    ranges = [BlockRange(s, e) for s, e in itertools.pairwise(starts)]
    ranges.append(BlockRange(starts[-1], None))
    return ranges


def file_rows(range_blocks: int, rows_per_block: float, cap: int) -> int:
    """Rows per Parquet file for a partition of `range_blocks` heap blocks of a table
    holding about `rows_per_block` rows a block (`pg_class.reltuples / blocks`; 0 when never
    analyzed: then `cap`).

    The partition's estimated rows are split into files of about `FILE_BLOCKS` blocks'
    worth, evenly, with 10% to spare so that an estimate a little low does not leave a tiny
    last file; at most `cap` rows a file."""
    estimate = rows_per_block * max(0, range_blocks)
    if estimate <= 0:
        return cap
    files = max(1, round(range_blocks / FILE_BLOCKS))
    return max(1, min(cap, math.ceil(estimate / files * 1.1)))


def range_filter(block_range: BlockRange, row_filter: str | None) -> str:
    """The WHERE of a range's query: its ctid range, and the publication's row filter."""
    where = block_range.predicate()
    return f"{where} AND ({row_filter})" if row_filter else where


def copy_statement(
    schema: str,
    table: str,
    columns: Sequence[str],
    block_range: BlockRange,
    *,
    only: bool = True,
    row_filter: str | None = None,
) -> sql.Composed:
    """`COPY (SELECT <columns> FROM ONLY schema.table WHERE <ctid range>) TO STDOUT (FORMAT
    csv)`; without `ONLY` when `only` is false (a partitioned table, read with its partitions),
    and with the publication's `row_filter` (`range_filter`).

    CSV carries each value in the text form of the type's output function, as pgoutput
    does; NULL is an unquoted empty field and an empty string a quoted one.
    """
    return sql.SQL("COPY (SELECT {} FROM {}{}.{} WHERE {}) TO STDOUT (FORMAT csv)").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        sql.SQL("ONLY " if only else ""),
        sql.Identifier(schema),
        sql.Identifier(table),
        sql.SQL(range_filter(block_range, row_filter)),
    )
