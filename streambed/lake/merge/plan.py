"""Which data files a flush must rewrite: a pure function of file key bounds and removed keys.

`plan_merge` decides, from the per-file key bounds Iceberg keeps for each data file, which
files can contain one of the keys a flush removes. Those files are read, filtered and
replaced (`MergePlan.rewrite`); every other file is kept as it is. A truncate drops every
file without reading it. Nothing here does I/O; the Spark executor (`streambed.spark.merger`)
carries a plan out.

A file can contain key `k` only if, for every key column `c`, `lower_c <= k_c <= upper_c`.
The test is per column, never on tuples. A column whose bounds are missing cannot exclude
anything, nor can a key value that bounds do not describe: `None` (full-row identity tables
may remove rows with NULLs, and Iceberg bounds only cover non-null values), a float NaN
(bounds exclude NaNs), or a value that does not compare with the bound (`TypeError`). When in
doubt the file is rewritten: a needless rewrite costs time, a missed one loses a delete.

Cost: the keys are sorted once by their first column; each file then bisects its first-column
range and checks the other columns only for the keys in that range, stopping at the first
match. With clustered (key-sorted) files that is O((K + F) log K) instead of O(K x F).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class PlanFile(Protocol):
    """What the plan needs to know about one data file (`streambed.lake.files.FileInfo`)."""

    @property
    def path(self) -> str: ...

    @property
    def record_count(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def key_bounds(self) -> tuple[tuple[Any, Any] | None, ...]:
        """One (lower, upper) pair per key column, in key-column order; None when unknown."""
        ...


@dataclass(frozen=True)
class MergePlan:
    """What one flush does to one table's existing data files.

    `rewrite`: files to read, filter (remove the removed keys) and replace by the files the
    executor writes. `drop`: files removed without being read (every file when `truncated`).
    `keep`: how many files stay untouched. A plan with nothing to rewrite is a pure append
    (plus the drops of a truncate): the new rows are written straight from Arrow.
    """

    rewrite: tuple[PlanFile, ...]
    drop: tuple[PlanFile, ...]
    keep: int
    truncated: bool
    removed_key_count: int

    @property
    def append_only(self) -> bool:
        """True when no existing file has to be read: the executor is not needed."""
        return not self.rewrite

    @property
    def rewrite_record_count(self) -> int:
        return sum(f.record_count for f in self.rewrite)

    @property
    def rewrite_size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.rewrite)

    def describe(self) -> str:
        """A human-readable summary, one line per file touched (for --dry-run)."""
        total = len(self.rewrite) + len(self.drop) + self.keep
        if self.truncated:
            head = f"truncate: drop all {len(self.drop)} files, then append the new rows"
        elif self.append_only:
            head = (
                f"{self.removed_key_count} removed keys match none of {total} files: "
                "append only, keep every file"
            )
        else:
            head = (
                f"{self.removed_key_count} removed keys: rewrite {len(self.rewrite)} of "
                f"{total} files ({self.rewrite_record_count} rows, "
                f"{_human_bytes(self.rewrite_size_bytes)}), keep {self.keep}"
            )
        lines = [head]
        lines += [f"  rewrite {f.path} ({f.record_count} rows)" for f in self.rewrite]
        lines += [f"  drop {f.path} ({f.record_count} rows)" for f in self.drop]
        return "\n".join(lines)


def plan_merge(
    files: Sequence[PlanFile],
    removed_keys: Sequence[tuple[Any, ...]],
    *,
    truncated: bool,
) -> MergePlan:
    """The files that can contain one of `removed_keys` must be rewritten; the rest are kept.

    `removed_keys` are typed Python values in key-column order (for full-row identity
    tables: every column, and values may be None). When `truncated`, every file is
    dropped unread and the removed keys do not matter.
    """
    if truncated:
        return MergePlan(
            rewrite=(),
            drop=tuple(files),
            keep=0,
            truncated=True,
            removed_key_count=len(removed_keys),
        )
    if not removed_keys:
        return MergePlan(rewrite=(), drop=(), keep=len(files), truncated=False, removed_key_count=0)
    index = _KeyIndex(removed_keys)
    rewrite = tuple(f for f in files if index.may_contain_any(f.key_bounds))
    return MergePlan(
        rewrite=rewrite,
        drop=(),
        keep=len(files) - len(rewrite),
        truncated=False,
        removed_key_count=len(removed_keys),
    )


def _unbounded(value: Any) -> bool:
    """True when file bounds say nothing about whether `value` is in the file."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _in_bounds(value: Any, bounds: tuple[Any, Any] | None) -> bool:
    """Whether a column's bounds allow `value`; True whenever they cannot rule it out."""
    if bounds is None or _unbounded(value):
        return True
    lower, upper = bounds
    try:
        if lower is not None and value < lower:
            return False
        return not (upper is not None and value > upper)
    except TypeError:
        return True


def _key_in_bounds(key: tuple[Any, ...], bounds: tuple[tuple[Any, Any] | None, ...]) -> bool:
    return all(
        _in_bounds(value, bounds[c] if c < len(bounds) else None) for c, value in enumerate(key)
    )


def _first(key: tuple[Any, ...]) -> Any:
    return key[0]


class _KeyIndex:
    """Removed keys sorted by first column, plus the keys that cannot be sorted (wildcards)."""

    def __init__(self, keys: Sequence[tuple[Any, ...]]) -> None:
        ordered = [k for k in keys if k and not _unbounded(k[0])]
        self.wildcards = [k for k in keys if not k or _unbounded(k[0])]
        try:
            ordered.sort(key=_first)
        except TypeError:  # first-column values of mixed, unorderable types
            self.wildcards += ordered
            ordered = []
        self.sorted = ordered

    def may_contain_any(self, bounds: tuple[tuple[Any, Any] | None, ...]) -> bool:
        if any(_key_in_bounds(k, bounds) for k in self.wildcards):
            return True
        first = bounds[0] if bounds else None
        lo, hi = 0, len(self.sorted)
        try:
            if first is not None and first[0] is not None:
                lo = bisect_left(self.sorted, first[0], key=_first)
            if first is not None and first[1] is not None:
                hi = bisect_right(self.sorted, first[1], key=_first)
        except TypeError:  # a bound that does not compare with the keys: scan them all
            lo, hi = 0, len(self.sorted)
        return any(_key_in_bounds(self.sorted[i], bounds) for i in range(lo, hi))


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
