"""Peak memory of `streambed run` while it replicates one huge transaction.

    PYTHONPATH=. .venv/bin/python bench/large_transaction.py [--rows 10000000] [--memory-mb 64]

Starts a throwaway Postgres and `python -m streambed.cli run` (query server off) with
STREAMBED_TXN_MEMORY_BYTES set to `--memory-mb`, then:

1. a streamed transaction of `--rows / 4` inserts that ROLLS BACK (staged, spilled, dropped);
2. one transaction inserting `--rows` rows (id bigint key, a text, n int, t timestamptz),
   which Postgres streams (protocol 2) while it runs.

It waits until the lake table has every row (one Iceberg snapshot holding the whole
transaction) and reports the peak resident memory of the streambed process (VmHWM from
/proc), the time from COMMIT to the data being queryable, and the snapshot count (of the
table: the empty table's copy plus the transaction). The numbers go into
docs/benchmarks.md, "## Large transactions". Set ARROW_DEFAULT_MEMORY_POOL to compare
Arrow allocators; it is passed on to streambed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from tests.fixtures.postgres import ThrowawayPostgres


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def lake_count(settings: Settings) -> tuple[int, int]:
    catalog = open_catalog(settings)
    if not catalog.table_exists(("public", "big")):
        return 0, 0
    table = catalog.load_table(("public", "big"))
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0, len(table.snapshots())
    return int(snapshot.summary.get("total-records") or 0), len(table.snapshots())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--memory-mb", type=int, default=64)
    args = parser.parse_args()
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory() as data_dir:
        url = pg.url()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE big (id bigint PRIMARY KEY, a text, n int, t timestamptz)")
        env = {
            **os.environ,
            "STREAMBED_SOURCE_URL": url,
            "STREAMBED_DATA_DIR": data_dir,
            "STREAMBED_QUERY_LISTEN": "",
            "STREAMBED_TXN_MEMORY_BYTES": str(args.memory_mb * 1024 * 1024),
            "STREAMBED_FLUSH_INTERVAL": "1",
            "STREAMBED_LOG_LEVEL": "warning",
        }
        settings = Settings.from_env(env)
        log = Path(data_dir) / "streambed.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "streambed.cli", "run"], env=env, stdout=out, stderr=out
            )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with psycopg.connect(url, autocommit=True) as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'streambed'"
                    ).fetchone()
                if row and row[0]:
                    break
                time.sleep(0.2)
            baseline = rss_mb(proc.pid)
            started = time.monotonic()
            with psycopg.connect(url) as conn:
                conn.execute(
                    "INSERT INTO big SELECT g, md5(g::text), g, now() "
                    "FROM generate_series(1, %s) g",
                    (args.rows // 4,),
                )
                conn.rollback()
            aborted = time.monotonic() - started
            started = time.monotonic()
            with psycopg.connect(url) as conn:
                conn.execute(
                    "INSERT INTO big SELECT g, md5(g::text), g, now() "
                    "FROM generate_series(1, %s) g",
                    (args.rows,),
                )
                conn.commit()
            committed = time.monotonic()
            count, snapshots = 0, 0
            while count < args.rows:
                if proc.poll() is not None:
                    raise SystemExit(f"streambed exited:\n{log.read_text()[-3000:]}")
                time.sleep(1)
                count, snapshots = lake_count(settings)
            done = time.monotonic()
            peak = peak_rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(120)
        print(f"rows                      {args.rows:,}")
        print(f"STREAMBED_TXN_MEMORY_BYTES {args.memory_mb} MiB")
        print(f"rss before                {baseline:,.0f} MiB")
        print(f"peak rss                  {peak:,.0f} MiB")
        print(f"peak - bound              {peak - args.memory_mb:,.0f} MiB")
        print(f"aborted txn ({args.rows // 4:,} rows) ran  {aborted:,.1f} s")
        print(f"insert+commit in source   {committed - started:,.1f} s")
        print(f"commit to queryable       {done - committed:,.1f} s")
        print(f"lake rows                 {count:,} in {snapshots} snapshot(s)")


if __name__ == "__main__":
    main()
