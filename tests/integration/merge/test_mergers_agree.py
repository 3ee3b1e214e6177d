"""The in-process merger and Spark's write the same rows for random plans: updates, deletes,
inserts, key changes, unchanged (TOAST) values and tables without a key."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streambed.core.errors import Kind, StreambedError
from streambed.lake.merge import plan_merge
from streambed.lake.merge.arrow_merger import ArrowMerger
from streambed.lake.merge.contract import Merger
from streambed.spark.merger import SparkMerger
from tests.fixtures.spark import PANDAS_WARNING
from tests.integration.merge.test_executor import field, key_tuples, write_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings(PANDAS_WARNING)]

KEYED = pa.schema(
    [
        field("k", pa.int32(), 1, nullable=False),
        field("t", pa.string(), 2, nullable=False),
        field("name", pa.string(), 3),
        field("n", pa.int64(), 4),
    ]
)
KEYLESS = pa.schema([field("a", pa.int32(), 1), field("b", pa.string(), 2)])

names = st.one_of(st.none(), st.sampled_from(["", "x", "y", "ü" * 3]))


@st.composite
def keyed_case(draw: st.DrawFn) -> dict[str, Any]:
    """Old rows with unique keys (k, t) and a delta against them."""
    keys = draw(
        st.lists(st.tuples(st.integers(0, 30), st.sampled_from("ab")), unique=True, max_size=40)
    )
    old = [(k, t, draw(names), draw(st.integers(-5, 5))) for k, t in keys]
    touched = draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []
    free = [(k, t) for k in range(31, 40) for t in "ab"]
    moved_to = draw(st.lists(st.sampled_from(free), unique=True, max_size=len(touched)))
    rows: list[tuple[Any, ...]] = []
    unchanged: list[bool] = []
    lookup: list[tuple[int, str]] = []
    removed: list[tuple[int, str]] = []
    for i, key in enumerate(touched):
        action = draw(st.sampled_from(["delete", "update", "toast", "move"]))
        removed.append(key)
        if action == "delete":
            continue
        new_key = moved_to[i] if action == "move" and i < len(moved_to) else key
        if new_key in [r[:2] for r in rows]:
            continue
        rows.append((*new_key, draw(names), draw(st.integers(-5, 5))))
        unchanged.append(action in ("toast", "move"))  # `name` comes from the old row
        lookup.append(key)
    for k in draw(st.lists(st.sampled_from(free), unique=True, max_size=4)):
        if k not in [r[:2] for r in rows]:
            rows.append((*k, draw(names), 1))
            unchanged.append(False)
            lookup.append(k)
    orphan = draw(st.booleans()) and bool(rows)  # a TOAST fill whose old row is not there
    if orphan:
        unchanged[-1] = True
        lookup[-1] = (99, "z")
    return {
        "old": old,
        "rows": rows,
        "removed": removed,
        "unchanged": unchanged,
        "lookup": lookup,
        "orphan": orphan,
        "per_file": draw(st.integers(1, 12)),
        # rows a pending position-delete file hides, by position in each file
        "hide": draw(st.lists(st.integers(0, 11), unique=True, max_size=4)),
    }


@st.composite
def keyless_case(draw: st.DrawFn) -> dict[str, Any]:
    """Old rows with duplicates and NULLs; removed rows, each taking one occurrence."""
    row = st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.just("x")))
    old = draw(st.lists(row, max_size=30))
    removed = draw(st.lists(st.sampled_from(old), max_size=8)) if old else []
    removed += draw(st.lists(row, max_size=2))  # maybe not in the lake at all
    return {"old": old, "rows": draw(st.lists(row, max_size=5)), "removed": removed}


def run(merger: Merger, directory: Path, case: dict[str, Any], keyed: bool) -> list[str]:
    schema = KEYED if keyed else KEYLESS
    old = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in case["old"]])
    old = old.cast(schema) if case["old"] else schema.empty_table()
    keys = ["k", "t"] if keyed else []
    identity = keys if keyed else schema.names
    files = write_files(directory / "data", old, keys, case.get("per_file", 7))
    removed = pa.Table.from_pylist(
        [dict(zip(identity, r, strict=True)) for r in case["removed"]],
        schema=pa.schema([schema.field(c) for c in identity]),
    )
    rows = pa.Table.from_pylist(
        [dict(zip(schema.names, r, strict=True)) for r in case["rows"]], schema=schema
    )
    plan = plan_merge(files, key_tuples(removed, identity), truncated=False)
    hide = case.get("hide", [])
    hidden = {
        f.path: pa.array([p for p in hide if p < f.record_count], pa.int64()) for f in plan.rewrite
    }
    return merger.execute(
        plan,
        rows=rows,
        removed_keys=removed,
        unchanged={"name": pa.array(case["unchanged"], pa.bool_())} if keyed else {},
        key_columns=keys,
        full_row=not keyed,
        arrow_schema=schema,
        output_dir=str(directory / "out"),
        lookup_keys=pa.Table.from_pylist(
            [dict(zip(keys, r, strict=True)) for r in case["lookup"]],
            schema=pa.schema([schema.field(c) for c in keys]),
        )
        if keyed
        else None,
        deleted_positions=hidden,
    )


def outcome(merger: Merger, directory: Path, case: dict[str, Any], keyed: bool) -> Any:
    """The rows written, as a multiset, or the kind of error raised; each file sorted by key."""
    try:
        paths = run(merger, directory, case, keyed)
    except StreambedError as e:
        return e.kind
    rows: Counter[tuple[Any, ...]] = Counter()
    for path in paths:
        table = pq.read_table(path)
        if keyed:
            keys = key_tuples(table, ["k", "t"])
            assert keys == sorted(keys), path
        rows.update(tuple(r.values()) for r in table.to_pylist())
    return rows


def agree(spark: SparkSession, case: dict[str, Any], keyed: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        here = outcome(ArrowMerger(), Path(tmp) / "here", case, keyed)
        there = outcome(SparkMerger(spark), Path(tmp) / "spark", case, keyed)
        assert here == there
        if keyed and case["orphan"]:  # a fill whose old row is not in the lake
            assert here is Kind.STATE


SETTINGS = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(case=keyed_case())
@example(  # an update and a key change, both with `name` unchanged, and a delete
    case={
        "old": [(1, "a", "n1", 1), (2, "a", None, 2), (3, "b", "n3", 3)],
        "rows": [(1, "a", "x", 5), (35, "b", "y", 6)],
        "removed": [(1, "a"), (2, "a"), (3, "b")],
        "unchanged": [True, True],
        "lookup": [(1, "a"), (2, "a")],
        "orphan": False,
        "per_file": 2,
    }
)
@example(  # a pending delete file hides (1, "a"): its update finds no old row to fill from
    case={
        "old": [(1, "a", "n1", 1), (2, "a", None, 2), (3, "b", "n3", 3)],
        "rows": [(1, "a", "x", 5), (2, "a", "y", 6)],
        "removed": [(1, "a"), (2, "a")],
        "unchanged": [False, True],
        "lookup": [(1, "a"), (2, "a")],
        "orphan": False,
        "per_file": 3,
        "hide": [0, 2],
    }
)
def test_keyed_tables(spark: SparkSession, case: dict[str, Any]) -> None:
    agree(spark, case, keyed=True)


@SETTINGS
@given(case=keyless_case())
@example(  # one of two duplicates, one of two all-NULL rows, a row not in the lake
    case={
        "old": [(1, "x"), (1, "x"), (None, None), (None, None), (2, None)],
        "rows": [(1, "x")],
        "removed": [(1, "x"), (None, None), (3, "x")],
    }
)
def test_tables_without_key(spark: SparkSession, case: dict[str, Any]) -> None:
    agree(spark, case, keyed=False)
