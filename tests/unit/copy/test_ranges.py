"""ctid block ranges: they tile the table, respect the size limits, and read as SQL."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streambed.copy.ranges import (
    BLOCKS_PER_PARTITION,
    FILE_BLOCKS,
    BlockRange,
    block_ranges,
    copy_statement,
    file_rows,
    range_filter,
)


@settings(deadline=None)  # timings on a shared machine vary
@given(
    blocks=st.integers(min_value=-5, max_value=2_000_000),
    slots=st.integers(min_value=-2, max_value=512),
    per_partition=st.integers(min_value=512, max_value=100_000),
)
def test_ranges_tile_the_table(blocks: int, slots: int, per_partition: int) -> None:
    ranges = block_ranges(blocks, slots, per_partition)
    assert ranges[0].start == 0
    assert ranges[-1].end is None  # open: blocks added after the size was read are copied
    for before, after in itertools.pairwise(ranges):
        assert before.end == after.start  # no gap, no overlap
        assert before.start < before.end
    n = max(0, blocks)
    bounded = [r for r in ranges if r.end is not None]
    assert all(r.end - r.start <= per_partition for r in bounded if r.end is not None)
    if n:
        assert ranges[-1].start < n  # the open range starts inside the table
        assert n - ranges[-1].start <= per_partition
        assert len(ranges) >= min(max(1, slots), n)
    else:
        assert ranges == [BlockRange(0, None)]


@settings(deadline=None)  # timings on a shared machine vary
@given(
    blocks=st.integers(min_value=1, max_value=2_000_000),
    slots=st.integers(min_value=1, max_value=64),
)
def test_whole_waves_of_even_ranges(blocks: int, slots: int) -> None:
    ranges = block_ranges(blocks, slots)
    needed = -(-blocks // BLOCKS_PER_PARTITION)
    if blocks >= slots:
        assert len(ranges) % slots == 0  # every wave of tasks is full
        assert len(ranges) < needed + slots  # and no more waves than needed
    else:
        assert len(ranges) == blocks  # one block each
    sizes = [(r.end if r.end is not None else blocks) - r.start for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert max(sizes) <= BLOCKS_PER_PARTITION


@pytest.mark.parametrize(
    ("blocks", "slots", "per_partition", "expected"),
    [
        (0, 4, 8, [(0, None)]),
        (1, 4, 8, [(0, None)]),
        (3, 4, 8, [(0, 1), (1, 2), (2, None)]),
        (8, 1, 8, [(0, None)]),
        (9, 1, 8, [(0, 4), (4, None)]),
        (16, 4, 8, [(0, 4), (4, 8), (8, 12), (12, None)]),
        (17, 2, 8, [(0, 4), (4, 8), (8, 12), (12, None)]),  # 3 needed: two full waves
        (16394, 2, 8192, [(0, 4098), (4098, 8197), (8197, 12295), (12295, None)]),
    ],
)
def test_block_ranges_examples(
    blocks: int, slots: int, per_partition: int, expected: list[tuple[int, int | None]]
) -> None:
    got = block_ranges(blocks, slots, per_partition)
    assert [(r.start, r.end) for r in got] == expected


@settings(deadline=None)  # timings on a shared machine vary
@given(
    blocks=st.integers(min_value=0, max_value=300),
    slots=st.integers(min_value=0, max_value=400),
    per_partition=st.integers(min_value=1, max_value=20),
)
def test_small_tables_tile_exactly(blocks: int, slots: int, per_partition: int) -> None:
    """Every block belongs to exactly one range."""
    ranges = block_ranges(blocks, slots, per_partition)
    owners = [
        sum(1 for r in ranges if r.start <= b and (r.end is None or b < r.end))
        for b in range(blocks + 5)
    ]
    assert owners == [1] * (blocks + 5)


def test_blocks_per_partition_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        block_ranges(10, 1, 0)


def test_predicates() -> None:
    assert BlockRange(0, None).predicate() == "ctid >= '(0,0)'::tid"
    assert BlockRange(8, 16).predicate() == "ctid >= '(8,0)'::tid AND ctid < '(16,0)'::tid"


def test_copy_statement_quotes_identifiers() -> None:
    statement = copy_statement('we"ird', "Orders", ["id", "a b"], BlockRange(2, 4)).as_string(None)
    assert statement == (
        'COPY (SELECT "id", "a b" FROM ONLY "we""ird"."Orders" '
        "WHERE ctid >= '(2,0)'::tid AND ctid < '(4,0)'::tid) TO STDOUT (FORMAT csv)"
    )
    partitioned = copy_statement("s", "t", ["id"], BlockRange(0, None), only=False)
    assert partitioned.as_string(None) == (
        'COPY (SELECT "id" FROM "s"."t" WHERE ctid >= \'(0,0)\'::tid) TO STDOUT (FORMAT csv)'
    )


def test_a_row_filter_is_added_to_the_range_in_parentheses() -> None:
    assert range_filter(BlockRange(2, 4), None) == BlockRange(2, 4).predicate()
    where = range_filter(BlockRange(0, None), "(a = 1) OR (b = 2)")
    assert where == "ctid >= '(0,0)'::tid AND ((a = 1) OR (b = 2))"
    statement = copy_statement("s", "t", ["a"], BlockRange(0, None), row_filter="a > 1 OR true")
    assert statement.as_string(None).endswith(
        "WHERE ctid >= '(0,0)'::tid AND (a > 1 OR true)) TO STDOUT (FORMAT csv)"
    )


def test_a_partition_is_split_evenly_into_files_of_about_64_mib_of_heap() -> None:
    assert FILE_BLOCKS * 8192 == 64 * 1024 * 1024
    per_block = 10_000_000 / 163_935  # pgbench_accounts at scale 100
    rows = file_rows(40_984, per_block, cap=4_000_000)  # a quarter of the table: 2.5M rows
    assert -(-2_500_000 // rows) == 5  # five files, not five and a sliver
    assert 500_000 < rows < 551_000
    assert file_rows(100, 50.0, cap=4_000_000) == 5_500  # a small range: one file
    assert file_rows(10, 10.0**9, cap=4_000_000) == 4_000_000  # capped
    assert file_rows(1_000, 0.0, cap=4_000_000) == 4_000_000  # never analyzed
    assert file_rows(0, 61.0, cap=7) == 7


@settings(max_examples=300)
@given(st.integers(1, 10**6), st.floats(0.01, 500.0), st.floats(0.8, 1.05))
def test_files_come_out_even_when_the_estimate_is_close(
    blocks: int, per_block: float, error: float
) -> None:
    rows = file_rows(blocks, per_block, cap=10**9)
    actual = int(blocks * per_block * error)  # the estimate 5% high .. 20% low
    files = max(1, -(-actual // rows))
    assert files <= max(1, round(blocks / FILE_BLOCKS))  # never an extra sliver of a file
