"""Cost of a flush touching 100 clustered keys, on small and large key-sorted tables.

    .venv/bin/python bench/merge_cost.py [--rows 10000,1000000,10000000] [--io spark|pyarrow]

Each table is written with pyarrow as key-sorted files of at most 1M rows (so each file has
tight key bounds), then one merge removes 100 consecutive keys (updating 50, deleting 50)
and adds 50 new rows. The printed time is plan + Spark execution (warm session, best of 3);
the design goal is that it stays about the same as the table grows (ratio near 1).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from streambed.lake.merge import plan_merge
from streambed.spark.merger import SparkMerger
from streambed.spark.session import get_spark, stop_spark

FILE_ROWS = 1_000_000
FIELD_ID = b"PARQUET:field_id"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, {FIELD_ID: b"1"}),
        pa.field("name", pa.string(), True, {FIELD_ID: b"2"}),
        pa.field("amount", pa.float64(), True, {FIELD_ID: b"3"}),
    ]
)


@dataclass(frozen=True)
class File:
    path: str
    record_count: int
    size_bytes: int
    key_bounds: tuple[tuple[Any, Any] | None, ...]


def make_table(directory: Path, rows: int) -> list[File]:
    directory.mkdir(parents=True)
    files = []
    for start in range(0, rows, FILE_ROWS):
        end = min(rows, start + FILE_ROWS)
        ids = pa.array(range(start, end), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "name": pa.array([f"row-{i}" for i in range(start, end)]),
                "amount": pa.array([i * 0.5 for i in range(start, end)]),
            },
            schema=SCHEMA,
        )
        path = directory / f"f-{start:012d}.parquet"
        pq.write_table(table, path)
        files.append(File(str(path), end - start, os.path.getsize(path), ((start, end - 1),)))
    return files


def one_flush(merger: SparkMerger, files: list[File], rows: int, out: Path) -> float:
    first = rows // 2
    removed = list(range(first, first + 100))
    new_ids = removed[:50] + list(range(rows, rows + 50))
    started = time.perf_counter()
    plan = plan_merge(files, [(k,) for k in removed], truncated=False)
    written = merger.execute(
        plan,
        rows=pa.table(
            {
                "id": pa.array(new_ids, pa.int64()),
                "name": [f"new-{i}" for i in new_ids],
                "amount": [0.0] * len(new_ids),
            },
            schema=SCHEMA,
        ),
        removed_keys=pa.table({"id": pa.array(removed, pa.int64())}),
        unchanged={},
        key_columns=["id"],
        full_row=False,
        arrow_schema=SCHEMA,
        output_dir=str(out),
    )
    elapsed = time.perf_counter() - started
    assert written and len(plan.rewrite) == 1, plan.describe()
    shutil.rmtree(out)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000,1000000", help="comma-separated table sizes")
    parser.add_argument("--io", choices=["spark", "pyarrow"], default="spark")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.rows.split(",")]
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas")
    spark = get_spark()
    merger = SparkMerger(spark, io=args.io)
    results: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="streambed-bench-") as tmp:
        root = Path(tmp)
        # Warm-up: the first job of a session pays for JIT and worker start.
        warm = make_table(root / "warm", 1000)
        one_flush(merger, warm, 1000, root / "warm-out")
        for rows in sizes:
            files = make_table(root / f"t{rows}", rows)
            times = [one_flush(merger, files, rows, root / "out") for _ in range(args.repeat)]
            results[rows] = min(times)
            print(
                f"rows={rows:>11,} files={len(files):>3} flush_100_keys_s={results[rows]:.2f} "
                f"(runs: {', '.join(f'{t:.2f}' for t in times)})",
                flush=True,
            )
    stop_spark()
    smallest = results[sizes[0]]
    for rows in sizes[1:]:
        print(f"ratio {rows:,} / {sizes[0]:,} rows = {results[rows] / smallest:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
