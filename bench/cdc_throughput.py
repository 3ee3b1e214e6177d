"""End-to-end change throughput of streambed vs. the source's own limit.

    .venv/bin/python bench/cdc_throughput.py [--rows 1000000] [--txn-rows 10000]
                                             [--updates 100000] [--metrics]
                                             [--write-mode merge-on-read|copy-on-write]

A throwaway Postgres 15 starts with an empty table. streambed starts on it first, as a user
would: it creates its own slot, finds nothing to copy and marks the table ready, so what is
measured afterwards is streaming, not the initial copy. Then the `pg_recvlogical` slot is
created, before any data is written, so both slots see exactly the same WAL. Then:

1. inserts: `--rows` rows in transactions of `--txn-rows` rows;
2. updates: `--updates` rows spread evenly over the whole table (every k-th key), in
   transactions of `--txn-rows` rows, so every data file of the lake holds changed rows.
   It also prints the bytes written to the warehouse per updated row (data, delete and
   metadata files). `--write-mode` is STREAMBED_WRITE_MODE.

For each phase the same stream is drained twice: by `pg_recvlogical` (pgoutput, protocol 2)
to /dev/null — the limit: what it costs the source to decode and ship the changes — and by
streambed's pipeline in this process (decode, buffer, merge, Parquet, Iceberg commit, state,
acknowledge), until every change is committed to the lake. It prints changes/s for both and
the ratio. The Spark session for merges is started before the update phase is timed (a
running streambed has it warm). With `--metrics` the pipeline keeps its Prometheus metrics
(`streambed.metrics.replication`), as `streambed run` does: what they cost.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streambed.commands.run import build_pipeline
from streambed.core.config import Settings
from streambed.core.log import setup
from streambed.state.store import TableState
from tests.fixtures.postgres import ThrowawayPostgres

SLOT_LIMIT = "bench_limit"


def drain_with_pg_recvlogical(pg: ThrowawayPostgres, url: str, end_lsn: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [
            str(pg.bin_dir / "pg_recvlogical"),
            "--dbname",
            url,
            "--slot",
            SLOT_LIMIT,
            "--start",
            "--endpos",
            end_lsn,
            "--no-loop",
            "-o",
            "proto_version=2",
            "-o",
            "publication_names=streambed",
            "-f",
            "/dev/null",
        ],
        check=True,
    )
    return time.perf_counter() - started


def warehouse_bytes(data_dir: Path) -> int:
    """Bytes of every file under the data directory's warehouse (nothing is deleted during
    a run: replaced files stay until the sweep, so the growth is what was written)."""
    return sum(p.stat().st_size for p in (data_dir / "warehouse").rglob("*") if p.is_file())


def start_streambed(settings: Settings) -> None:
    """First start on the empty table: slot created, nothing copied, the table ready."""
    runtime = build_pipeline(settings)
    try:
        runtime.pipeline.run(until=lambda: _ready(runtime.state.table("public", "bench_rows")))
    finally:
        runtime.close()


def _ready(table: TableState | None) -> bool:
    return table is not None and table.status == "ready"


def drain_with_streambed(settings: Settings, changes: int, metrics: bool) -> float:
    observer = None
    if metrics:
        from prometheus_client import CollectorRegistry

        from streambed.metrics.replication import ReplicationMetrics

        observer = ReplicationMetrics(CollectorRegistry())
    runtime = build_pipeline(settings, metrics=observer)
    pipeline = runtime.pipeline
    try:
        started = time.perf_counter()
        pipeline.run(until=lambda: pipeline.stats.rows >= changes)
        return time.perf_counter() - started
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--txn-rows", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument(
        "--write-mode", choices=["merge-on-read", "copy-on-write"], default="merge-on-read"
    )
    parser.add_argument("--metrics", action="store_true", help="keep the Prometheus metrics")
    args = parser.parse_args()
    setup(os.environ.get("BENCH_LOG", "warning"))
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory() as data_dir:
        url = pg.url()
        pg.psql(
            "CREATE TABLE bench_rows (id bigint PRIMARY KEY, name text, "
            "amount numeric(12,2), at timestamptz)"
        )
        pg.psql(
            "CREATE PUBLICATION streambed FOR ALL TABLES WITH (publish_via_partition_root = true)"
        )
        settings = Settings.from_env(
            {
                "STREAMBED_SOURCE_URL": url,
                "STREAMBED_DATA_DIR": data_dir,
                "STREAMBED_QUERY_LISTEN": "",
                "STREAMBED_HEARTBEAT_INTERVAL": "0",
                "STREAMBED_WRITE_MODE": args.write_mode,
            }
        )
        start_streambed(settings)
        results = []

        # ---- phase 1: inserts ----
        pg.psql(f"SELECT pg_create_logical_replication_slot('{SLOT_LIMIT}', 'pgoutput')")
        for start in range(1, args.rows + 1, args.txn_rows):
            stop = min(start + args.txn_rows - 1, args.rows)
            pg.psql(
                "INSERT INTO bench_rows SELECT g, 'name ' || g, g * 0.01, now() "
                f"FROM generate_series({start}, {stop}) g"
            )
        end = pg.psql("SELECT pg_current_wal_lsn()::text")[0][0]
        limit = drain_with_pg_recvlogical(pg, url, end)
        ours = drain_with_streambed(settings, args.rows, args.metrics)
        results.append(("inserts", args.rows, limit, ours))

        # ---- phase 2: updates spread over the table ----
        pg.psql(f"SELECT pg_drop_replication_slot('{SLOT_LIMIT}')")
        pg.psql(f"SELECT pg_create_logical_replication_slot('{SLOT_LIMIT}', 'pgoutput')")
        step = max(1, args.rows // args.updates)
        per_txn = args.txn_rows * step
        for low in range(1, args.rows + 1, per_txn):
            pg.psql(
                "UPDATE bench_rows SET amount = amount + 1, name = 'updated' "
                f"WHERE id BETWEEN {low} AND {low + per_txn - 1} AND id % {step} = 0"
            )
        updated = pg.psql(
            f"SELECT count(*) FROM bench_rows WHERE id % {step} = 0 AND name = 'updated'"
        )[0][0]
        end = pg.psql("SELECT pg_current_wal_lsn()::text")[0][0]
        limit = drain_with_pg_recvlogical(pg, url, end)
        from streambed.spark.session import get_spark, stop_spark

        get_spark(settings.spark_master)  # warm, as in a running streambed
        stored = warehouse_bytes(Path(data_dir))
        # each update counts as a removed key plus a new row in the pipeline's statistics
        ours = drain_with_streambed(settings, 2 * updated, args.metrics)
        stop_spark()
        written = warehouse_bytes(Path(data_dir)) - stored
        results.append((f"updates over {args.rows:,} rows", updated, limit, ours))

    print(f"{'phase':32} {'changes':>10} {'pg_recvlogical':>16} {'streambed':>14} {'ratio':>6}")
    for phase, changes, limit, ours in results:
        print(
            f"{phase:32} {changes:>10,} {changes / limit:>12,.0f}/s {changes / ours:>10,.0f}/s "
            f"{limit / ours:>6.2f}"
        )
    print("ratio = streambed changes/s divided by pg_recvlogical changes/s (target >= 0.5)")
    print(
        f"updates: {written / max(1, updated):,.0f} bytes written to the warehouse per updated "
        f"row ({written:,} bytes; write mode {settings.write_mode})"
    )


if __name__ == "__main__":
    main()
