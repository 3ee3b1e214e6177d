"""Cost of one commit as a table's history grows: the manifest fix and snapshot expiry.

    .venv/bin/python bench/commit_cost.py [--commits 150] [--every 25] [--merge-on-read]

Each run makes `--commits` commits to a new 100-row table on a local SQLite catalog; each
commit replaces the previous commit's data file by a new one, as a flush that updates rows
does. Four runs:

- `pyiceberg`: pyiceberg 0.12's own overwrite, no expiry (what streambed did before);
- `streambed, no expiry`: `streambed.lake.commit` (its overwrite leaves out manifests with
  no live file), every snapshot kept;
- `streambed, max 100` and `max 20`: the same, with the sink's expiry
  (`streambed.lake.expire`, STREAMBED_SNAPSHOT_MAX) after each commit;
- `streambed as run`: what `streambed run` does with its defaults: expiry at 50 snapshots,
  and a table that keeps its last 100 metadata files (`tables.METADATA_PROPERTIES`).

With `--merge-on-read`, each commit after the first is a merge-on-read flush of one
updated row (a 1-row data file, a delete file against the first file), as `streambed run`
commits it, once with `commit.manifest-merge.enabled=false` (what streambed did before it
merged manifests) and once with its defaults (`streambed.lake.manifest_merge`).

It prints the commit time (median of the last `--every` commits), the snapshots and
manifests of the current snapshot, the metadata file's size, and the files and bytes in
the table's metadata directory at every `--every` commits; then each run's last figure
beside the pyiceberg run's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table, TableProperties

from streambed.lake.commit import SUMMARY_LSN, commit, data_file
from streambed.lake.deletes import write_position_deletes
from streambed.lake.expire import Retention, expire
from streambed.lake.files import current_data_files
from streambed.lake.tables import METADATA_PROPERTIES

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
ROWS = pa.table({"id": pa.array(range(100), pa.int64()), "v": ["x"] * 100}, schema=SCHEMA)

Committer = Callable[[Table, list[str], list[str], int], None]


def stock_commit(table: Table, removed: list[str], added: list[str], lsn: int) -> None:
    """pyiceberg's overwrite, as streambed called it before `streambed.lake.overwrite`."""
    live = current_data_files(table)
    with table.transaction() as tx:
        update = tx.update_snapshot(snapshot_properties={SUMMARY_LSN: str(lsn)})
        with update.overwrite() as overwrite:
            for path in removed:
                overwrite.delete_data_file(live[path])
            for path in added:
                overwrite.append_data_file(data_file(table.io, tx.table_metadata, path))


def lean_commit(table: Table, removed: list[str], added: list[str], lsn: int) -> None:
    commit(table, removed=removed, added=added, lsn=lsn)


class MergeOnRead:
    """A merge-on-read flush per commit after the first: one updated row, i.e. a 1-row data
    file and a delete file hiding one row of the first commit's file."""

    def __init__(self) -> None:
        self.base: str | None = None

    def __call__(self, table: Table, removed: list[str], added: list[str], lsn: int) -> None:
        if self.base is None:
            self.base = added[0]
            commit(table, removed=[], added=added, lsn=lsn)
            return
        row = pa.table({"id": [lsn % 100], "v": ["y"]}, schema=SCHEMA)
        pq.write_table(row, added[0].removeprefix("file://"))
        deletes = write_position_deletes(table, {self.base: pa.array([lsn % 100], pa.int64())})
        commit(table, removed=[], added=added, lsn=lsn, deletes=deletes)


def run(
    name: str,
    committer: Committer,
    keep: int | None,
    commits: int,
    every: int,
    properties: dict[str, str] | None = None,
) -> float:
    root = tempfile.mkdtemp(prefix="streambed-bench-commit-")
    try:
        catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}"
        )
        catalog.create_namespace("bench")
        table = catalog.create_table("bench.t", schema=SCHEMA, properties=properties or {})
        directory = os.path.join(table.location().removeprefix("file://"), "metadata")
        os.makedirs(f"{root}/data")
        previous: list[str] = []
        times: list[float] = []
        print(f"\n{name}")
        header = ["commits", "commit ms", "snapshots", "manifests", "metadata kB", "dir files"]
        header += ["dir MB"]
        print(" ".join(f"{h:>12}" for h in header))
        for i in range(1, commits + 1):
            path = f"{root}/data/f{i}.parquet"
            pq.write_table(ROWS, path)
            start = time.perf_counter()
            committer(table, previous, [f"file://{path}"], i)
            if keep is not None:
                expire(table, Retention(hours=1, max_snapshots=keep))
            times.append(time.perf_counter() - start)
            previous = [f"file://{path}"]
            if i % every == 0:
                snapshot = table.current_snapshot()
                assert snapshot is not None
                size = os.path.getsize(str(table.metadata_location).removeprefix("file://"))
                median = statistics.median(times[-every:]) * 1000
                figures: list[object] = [i, round(median), len(table.metadata.snapshots)]
                manifests = len(snapshot.manifests(table.io))
                names = os.listdir(directory)
                held = sum(os.path.getsize(os.path.join(directory, n)) for n in names)
                figures += [manifests, f"{size / 1000:.1f}", len(names), f"{held / 1e6:.1f}"]
                print(" ".join(f"{f:>12}" for f in figures))
        return statistics.median(times[-every:])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=150)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument(
        "--merge-on-read",
        action="store_true",
        help="merge-on-read flushes, with and without merging manifests, instead",
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    runs: list[tuple[str, Committer, int | None, dict[str, str] | None]]
    if args.merge_on_read:
        unmerged = METADATA_PROPERTIES | {TableProperties.MANIFEST_MERGE_ENABLED: "false"}
        runs = [
            ("merge-on-read, manifests not merged", MergeOnRead(), 50, unmerged),
            ("merge-on-read as run", MergeOnRead(), 50, METADATA_PROPERTIES),
        ]
        for name, c, keep, props in runs:
            run(name, c, keep, args.commits, args.every, props)
        return
    runs = [
        ("pyiceberg", stock_commit, None, None),
        ("streambed, no expiry", lean_commit, None, None),
        ("streambed, max 100", lean_commit, 100, None),
        ("streambed, max 20", lean_commit, 20, None),
        ("streambed as run", lean_commit, 50, METADATA_PROPERTIES),
    ]
    last = {
        name: run(name, c, keep, args.commits, args.every, props) for name, c, keep, props in runs
    }
    base = last["pyiceberg"]
    print(f"\nlast {args.every} commits of {args.commits} (median, commit + expiry):")
    for name, seconds in last.items():
        print(f"  {name:<22} {seconds * 1000:7.0f} ms   {base / seconds:5.1f}x pyiceberg's")


if __name__ == "__main__":
    main()
