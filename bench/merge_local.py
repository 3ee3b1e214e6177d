"""Merge time in this process (pyarrow) against Spark (warm), by the size of the rewrite.

    PYTHONPATH=. .venv/bin/python -m bench.merge_local [--mib 1,4,16,64,256] [--master local[2]]

For each size, a key-sorted table of about that many MiB of Parquet (an int64 key, a short
string, a double and 48 random bytes a row; files of 500,000 rows) is rewritten whole: 100
keys spread over it are removed (50 updated, 50 deleted) and 50 new rows added, so every
file is read, filtered and written again. Printed: the time of `ArrowMerger.execute` and of
`SparkMerger.execute` (best of two each, Spark warmed up by a first small merge), their
ratio, the in-process peak of Arrow memory, and the largest size at which the in-process
merge is still faster (the crossover that STREAMBED_MERGE_LOCAL_BYTES is chosen from).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.merge_cost import SCHEMA, File
from streambed.lake.merge import plan_merge
from streambed.lake.merge.arrow_merger import ArrowMerger
from streambed.lake.merge.contract import Merger
from streambed.spark.merger import SparkMerger
from streambed.spark.session import get_spark, stop_spark

FILE_ROWS = 500_000
PAD = 48
SCHEMA_PAD = SCHEMA.append(pa.field("pad", pa.binary(), True, {b"PARQUET:field_id": b"4"}))
MiB = 1024 * 1024


def rows_for(mib: float, per_row: float) -> int:
    return max(1_000, int(mib * MiB / per_row))


def chunk(start: int, end: int) -> pa.Table:
    n = end - start
    pad = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(PAD), n, [None, pa.py_buffer(os.urandom(PAD * n))]
    )
    return pa.table(
        {
            "id": pa.array(range(start, end), pa.int64()),
            "name": pa.array([f"row-{i}" for i in range(start, end)]),
            "amount": pa.array([i * 0.5 for i in range(start, end)]),
            "pad": pad.cast(pa.binary()),
        },
        schema=SCHEMA_PAD,
    )


def make_table(directory: Path, rows: int) -> list[File]:
    directory.mkdir(parents=True)
    files = []
    for start in range(0, rows, FILE_ROWS):
        end = min(rows, start + FILE_ROWS)
        path = directory / f"f-{start:012d}.parquet"
        pq.write_table(chunk(start, end), path, compression="zstd")
        files.append(File(str(path), end - start, os.path.getsize(path), ((start, end - 1),)))
    return files


def one_merge(merger: Merger, files: list[File], rows: int, out: Path) -> float:
    removed = [i * (rows // 100) for i in range(100)]
    new = pa.concat_tables([chunk(k, k + 1) for k in removed[:50]] + [chunk(rows, rows + 50)])
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    plan = plan_merge(files, [(k,) for k in removed], truncated=False)
    merger.execute(
        plan,
        rows=new,
        removed_keys=pa.table({"id": pa.array(removed, pa.int64())}),
        unchanged={},
        key_columns=["id"],
        full_row=False,
        arrow_schema=SCHEMA_PAD,
        output_dir=str(out),
    )
    return time.perf_counter() - started


def best(times: int, merger: Merger, files: list[File], rows: int, out: Path) -> float:
    return min(one_merge(merger, files, rows, out) for _ in range(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", default="1,4,16,64,256")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    sizes = [float(s) for s in args.mib.split(",")]
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    here = ArrowMerger()
    spark = SparkMerger(get_spark(args.master))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sample = make_table(root / "sample", 100_000)
        per_row = sum(f.size_bytes for f in sample) / 100_000
        one_merge(spark, sample, 100_000, root / "warm")  # Spark's first job is slow
        for mib in sizes:
            rows = rows_for(mib, per_row)
            files = make_table(root / f"t{mib}", rows)
            stored = sum(f.size_bytes for f in files) / MiB
            t_here = best(2, here, files, rows, root / "out")
            peak = pa.default_memory_pool().max_memory() / MiB
            t_spark = best(2, spark, files, rows, root / "out")
            results.append((stored, rows, t_here, t_spark, peak))
            print(
                f"{stored:8.1f} MiB {rows:>10,} rows  in process {t_here:7.3f} s  "
                f"spark {t_spark:7.3f} s  spark/here {t_spark / t_here:5.1f}x  "
                f"arrow peak {peak:7.0f} MiB",
                flush=True,
            )
            shutil.rmtree(root / f"t{mib}")
    stop_spark()
    faster = [r for r in results if r[2] < r[3]]
    if faster:
        print(f"in process is faster up to {max(r[0] for r in faster):.1f} MiB of rewrite")
    else:
        print("spark was faster at every size")


if __name__ == "__main__":
    main()
