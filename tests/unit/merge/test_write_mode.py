"""The write-mode rule: which files a flush rewrites and which get a delete file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.lake.merge.contract import without_positions
from streambed.lake.merge.plan import MergePlan
from streambed.lake.merge.positions import split_plan
from streambed.lake.merge.write_mode import FileChange, choose


@pytest.mark.parametrize(
    ("record_count", "removed", "hidden", "share", "expected"),
    [
        (1000, 10, 0, 0.2, "delete"),  # 1%: a delete file
        (1000, 199, 0, 0.2, "delete"),  # just under a fifth
        (1000, 200, 0, 0.2, "rewrite"),  # a fifth: rewrite (at most 5 bytes per changed byte)
        (1000, 10, 190, 0.2, "rewrite"),  # pending deletes count toward the share
        (1000, 0, 500, 0.2, "untouched"),  # no removed key in it: left alone
        (10, 1, 0, 0.0, "rewrite"),  # share 0: every file that loses a row is rewritten
        (10, 9, 0, 1.0, "delete"),  # share 1: rewritten only when every row is gone
        (10, 4, 6, 1.0, "rewrite"),
        (0, 1, 0, 0.2, "rewrite"),  # a file without a row count is rewritten
    ],
)
def test_choose(record_count: int, removed: int, hidden: int, share: float, expected: str) -> None:
    choice = choose([FileChange("f", record_count, removed, hidden)], share)
    got = {"rewrite": choice.rewrite, "delete": choice.delete, "untouched": choice.untouched}
    assert got[expected] == ("f",)
    assert sum(len(v) for v in got.values()) == 1


@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100), st.integers(0, 100)), max_size=20),
    st.floats(0, 1),
)
def test_every_file_lands_in_exactly_one_group(
    files: list[tuple[int, int, int]], share: float
) -> None:
    changes = [FileChange(f"f{i}", n, r, h) for i, (n, r, h) in enumerate(files)]
    choice = choose(changes, share)
    groups = [*choice.rewrite, *choice.delete, *choice.untouched]
    assert sorted(groups) == sorted(c.path for c in changes)
    for c in changes:
        if c.path in choice.delete:  # a delete file only for a file that loses rows
            assert c.removed > 0 and c.removed_share < share


@dataclass(frozen=True)
class _File:
    path: str
    record_count: int
    size_bytes: int = 100
    key_bounds: tuple[Any, ...] = ()


def test_split_plan_keeps_pending_positions_of_rewritten_files_only() -> None:
    files = (_File("a", 100), _File("b", 100), _File("c", 100))
    plan = MergePlan(rewrite=files, drop=(), keep=2, truncated=False, removed_key_count=5)
    found = {"a": pa.array([1, 2], pa.int64()), "b": pa.array([3] * 30, pa.int64())}
    hidden = {"a": pa.array([7], pa.int64()), "b": pa.array([9], pa.int64())}
    split = split_plan(plan, found, hidden, 0.2)
    assert [f.path for f in split.rewrite.rewrite] == ["b"]  # 31 of 100 rows
    assert split.rewrite.keep == 4  # the two kept before, plus a and c
    assert list(split.positions) == ["a"]
    assert split.positions["a"].to_pylist() == [1, 2]
    assert split.hidden == {"b": hidden["b"]}


def test_without_positions_counts_from_the_batch_offset() -> None:
    table = pa.table({"x": list(range(10, 20))})
    assert without_positions(table, pa.array([0, 3], pa.int64())).column("x").to_pylist() == [
        11,
        12,
        14,
        15,
        16,
        17,
        18,
        19,
    ]
    later = without_positions(table, pa.array([12, 19, 25], pa.int64()), offset=10)
    assert later.column("x").to_pylist() == [10, 11, 13, 14, 15, 16, 17, 18]
    assert without_positions(table, None) is table
