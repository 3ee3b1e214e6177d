"""ctid block ranges: they tile the table, respect the size limits, and read as SQL."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streambed.copy.ranges import BLOCKS_PER_PARTITION, BlockRange, block_ranges, copy_statement


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
        'COPY (SELECT "id", "a b" FROM "we""ird"."Orders" '
        "WHERE ctid >= '(2,0)'::tid AND ctid < '(4,0)'::tid) TO STDOUT (FORMAT csv)"
    )
