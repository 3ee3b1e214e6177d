"""plan_merge: tables of (files, removed keys) -> expected plan, and a safety property."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streambed.lake.merge import MergePlan, plan_merge


@dataclass(frozen=True)
class File:
    path: str
    record_count: int = 10
    size_bytes: int = 1000
    key_bounds: tuple[tuple[Any, Any] | None, ...] = ()


def f(path: str, *bounds: tuple[Any, Any] | None) -> File:
    return File(path, key_bounds=bounds)


UTC = datetime.UTC
T0 = datetime.datetime(2024, 1, 1, tzinfo=UTC)

CASES: list[tuple[str, list[File], list[tuple[Any, ...]], list[str]]] = [
    ("no keys: append only", [f("a", (1, 10))], [], []),
    ("key inside bounds", [f("a", (1, 10)), f("b", (11, 20))], [(5,)], ["a"]),
    ("key on lower bound", [f("a", (1, 10)), f("b", (11, 20))], [(11,)], ["b"]),
    ("key on upper bound", [f("a", (1, 10)), f("b", (11, 20))], [(10,)], ["a"]),
    ("key between files", [f("a", (1, 10)), f("b", (20, 30))], [(15,)], []),
    ("key below all", [f("a", (1, 10))], [(0,)], []),
    ("key above all", [f("a", (1, 10))], [(11,)], []),
    (
        "keys in several files",
        [f("a", (1, 10)), f("b", (11, 20)), f("c", (21, 30))],
        [(2,), (29,)],
        ["a", "c"],
    ),
    ("overlapping files both rewritten", [f("a", (1, 10)), f("b", (5, 15))], [(7,)], ["a", "b"]),
    ("missing bounds: rewrite", [f("a", None), f("b", (11, 20))], [(5,)], ["a"]),
    ("no bounds at all: rewrite", [File("a")], [(5,)], ["a"]),
    ("open lower bound", [f("a", (None, 10))], [(-100,)], ["a"]),
    ("open upper bound", [f("a", (1, None))], [(100,)], ["a"]),
    # Per-column bounds, not tuple bounds: (2, 50) is between (1, 0) and (3, 0) as a tuple,
    # but column 2's bounds [0, 9] exclude 50.
    ("composite: second column excludes", [f("a", (1, 3), (0, 9))], [(2, 50)], []),
    ("composite: both columns inside", [f("a", (1, 3), (0, 9))], [(2, 5)], ["a"]),
    ("composite: first column excludes", [f("a", (1, 3), (0, 9))], [(4, 5)], []),
    ("composite: second bounds missing", [f("a", (1, 3), None)], [(2, 50)], ["a"]),
    ("composite: bounds for first column only", [f("a", (1, 3))], [(2, 50)], ["a"]),
    ("text keys", [f("a", ("apple", "mango")), f("b", ("melon", "zebra"))], [("kiwi",)], ["a"]),
    ("text key past truncated upper", [f("a", ("a", "m"))], [("ma",)], []),
    ("decimal keys", [f("a", (Decimal("1.00"), Decimal("2.50")))], [(Decimal("2.5"),)], ["a"]),
    ("decimal outside", [f("a", (Decimal("1.00"), Decimal("2.50")))], [(Decimal("2.51"),)], []),
    (
        "timestamptz keys",
        [f("a", (T0, T0 + datetime.timedelta(days=1)))],
        [(T0 + datetime.timedelta(hours=1),)],
        ["a"],
    ),
    (
        "full row: None is a wildcard",
        [f("a", (1, 3), ("x", "y")), f("b", (5, 6), ("x", "y"))],
        [(None, "x")],
        ["a", "b"],
    ),
    ("full row: None column, other excludes", [f("a", (1, 3), ("x", "y"))], [(None, "z")], []),
    ("full row: None in second column", [f("a", (1, 3), ("x", "y"))], [(2, None)], ["a"]),
    ("NaN is a wildcard", [f("a", (1.0, 2.0))], [(float("nan"),)], ["a"]),
    ("incomparable bound: rewrite", [f("a", ("a", "z"))], [(5,)], ["a"]),
    (
        "naive vs aware datetime: rewrite",
        [f("a", (T0, T0))],
        [(datetime.datetime(2024, 1, 1),)],
        ["a"],
    ),
]


@pytest.mark.parametrize(
    ("files", "keys", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_plan_merge(files: list[File], keys: list[tuple[Any, ...]], expected: list[str]) -> None:
    plan = plan_merge(files, keys, truncated=False)
    assert [x.path for x in plan.rewrite] == expected
    assert plan.drop == ()
    assert plan.keep == len(files) - len(expected)
    assert plan.append_only == (not expected)
    assert plan.removed_key_count == len(keys)


def test_truncate_drops_every_file_unread() -> None:
    files = [f("a", (1, 10)), f("b", (11, 20))]
    plan = plan_merge(files, [(5,)], truncated=True)
    assert plan == MergePlan(
        rewrite=(), drop=tuple(files), keep=0, truncated=True, removed_key_count=1
    )
    assert plan.append_only
    assert plan.describe().startswith("truncate: drop all 2 files")


def test_no_files() -> None:
    plan = plan_merge([], [(1,)], truncated=False)
    assert plan == MergePlan(rewrite=(), drop=(), keep=0, truncated=False, removed_key_count=1)


def test_mixed_type_first_column_keys_are_still_checked() -> None:
    # Keys that cannot be sorted together fall back to a scan, never to a miss.
    files = [f("a", (1, 10)), f("b", ("a", "c"))]
    plan = plan_merge(files, [(5,), ("b",)], truncated=False)
    assert [x.path for x in plan.rewrite] == ["a", "b"]


def test_describe() -> None:
    files = [File("a", 100, 2048, ((1, 10),)), File("b", 50, 1024, ((11, 20),))]
    text = plan_merge(files, [(3,)], truncated=False).describe()
    assert text == (
        "1 removed keys: rewrite 1 of 2 files (100 rows, 2.0 KiB), keep 1\n  rewrite a (100 rows)"
    )
    assert "append only" in plan_merge(files, [(30,)], truncated=False).describe()


def test_many_keys_many_files_is_fast() -> None:
    import time

    files = [f(f"f{i}", (i * 1000, i * 1000 + 999)) for i in range(1000)]
    keys = [(k,) for k in range(0, 1_000_000, 10)]  # 100k keys, every file touched
    start = time.perf_counter()
    plan = plan_merge(files, keys, truncated=False)
    assert len(plan.rewrite) == 1000
    clustered = [(k,) for k in range(500_000, 500_100)]
    assert len(plan_merge(files, clustered, truncated=False).rewrite) == 1
    assert time.perf_counter() - start < 5


# ---- property: the plan never misses a file that holds a removed key --------------------

_values = st.one_of(st.integers(-50, 50), st.none())
_key = st.tuples(st.integers(-50, 50), _values)


def _bounds(column: list[Any]) -> tuple[Any, Any] | None:
    present = [v for v in column if v is not None]
    return (min(present), max(present)) if present else None


@st.composite
def _files(draw: st.DrawFn) -> list[tuple[File, list[tuple[Any, ...]]]]:
    out = []
    for i in range(draw(st.integers(0, 6))):
        rows = sorted(draw(st.lists(_key, min_size=1, max_size=8)), key=lambda k: k[0])
        bounds = tuple(_bounds([r[c] for r in rows]) for c in range(2))
        if draw(st.booleans()):
            bounds = (bounds[0], None)  # some files lack bounds for a column
        out.append((File(f"f{i}", len(rows), 100, bounds), rows))
    return out


def _contains(rows: list[tuple[Any, ...]], key: tuple[Any, ...]) -> bool:
    return key in rows  # null-safe equality, like full-row identity


@settings(max_examples=300, deadline=None)
@given(files=_files(), removed=st.lists(_key, max_size=10))
def test_plan_never_misses_a_file_holding_a_removed_key(
    files: list[tuple[File, list[tuple[Any, ...]]]], removed: list[tuple[Any, ...]]
) -> None:
    plan = plan_merge([fi for fi, _ in files], removed, truncated=False)
    rewritten = {fi.path for fi in plan.rewrite}
    for fi, rows in files:
        if any(_contains(rows, k) for k in removed):
            assert fi.path in rewritten
    assert plan.keep + len(plan.rewrite) == len(files)
