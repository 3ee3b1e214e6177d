"""Initial copy throughput: streambed's copy vs raw COPY and DuckDB's postgres_scanner.

    .venv/bin/python bench/initial_load.py [--scales 10,100] [--spark local[2]] [--repeat 3]
                                           [--reader duckdb|csv] [--table pgbench|app]
                                           [--local-bytes N]

For each pgbench scale (10 → 1M accounts, 100 → 10M) it creates `pgbench_accounts` in a
throwaway Postgres (`pgbench -i`), then times, on the same machine:

1. raw: `psql -c "\\copy pgbench_accounts TO /dev/null"` (COPY TO STDOUT drained by libpq),
   the limit any client can reach;
2. duckdb: DuckDB 1.5.5's postgres extension (wheel `duckdb-extension-postgres`, loaded
   offline) writing the table to one Parquet file;
3. streambed: the initial copy of one table (temporary-slot snapshot, ctid ranges each
   read with `--reader`, the default `STREAMBED_COPY_READER=duckdb` or `csv`, and written
   as Parquet with field ids; one Iceberg commit). A table of at most `--local-bytes`
   (default: `STREAMBED_COPY_LOCAL_BYTES`'s, 256 MiB) is copied by threads of streambed's
   process, a larger one on a warm Spark session, as `streambed run` copies them; the
   line printed says which. `--local-bytes 0` measures the Spark path at every scale.

`--table app` copies instead a table shaped like an application's (`app_orders`, 100,000
rows per scale unit: bigint key, uuid, timestamptz, text, unconstrained numeric,
numeric(12,2), jsonb of about 90 bytes, text[], inet, bool), whose uuid, jsonb, numeric,
array and inet columns pgbench's table lacks.

Beside each rate it prints the CPU seconds each path used (median of the rounds): the
copier's (psql; DuckDB's process; streambed's driver, JVM and Python workers) and the
source's (the postmaster and its backends, from /proc). On one machine both share the
cores, so a path's wall time is bounded below by the sum over both halves of the cores.

Before each measured copy, its path is warmed by copying a small table the same way
(on Spark, in at least as many ctid ranges as Spark has cores, so every Python worker has
started: Spark stops workers idle for a minute); that copy's time is printed too (what a
first copy pays). Each scale
runs `--repeat` rounds (3), the three copies interleaved so they see the same load; the
best of each is printed (the machine it was written for is shared and noisy), then each
path's median, and whether the targets are met by the best rounds and by the medians.
Nothing is written outside a temporary directory.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from bench.cpu import postmaster_pid, tree_cpu
from streambed.copy.catalog import table_info
from streambed.copy.client import find_psql
from streambed.copy.here import range_threads
from streambed.copy.job import copies_here, copy_table, lake_table
from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from streambed.source.snapshot import SnapshotAnchor
from streambed.spark.session import get_spark, stop_spark
from tests.fixtures.postgres import ThrowawayPostgres

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession


SETTLE = 0.3
"""Seconds to wait after a copy before reading the source's CPU: the postmaster reaps the
copy's backends (and adds their CPU to its own) only after they exit."""


@dataclass
class Run:
    """One path's rounds: wall seconds, and CPU seconds of the copier and of the source."""

    walls: list[float] = field(default_factory=list)
    copier: list[float] = field(default_factory=list)
    source: list[float] = field(default_factory=list)

    def cpu(self) -> str:
        return (
            f"CPU s: copier {statistics.median(self.copier):.1f}, "
            f"source {statistics.median(self.source):.1f}"
        )


def _measured(
    run: Run, postmaster: int, copier: Callable[[], float], fn: Callable[[], float | None]
) -> None:
    """Run `fn`, adding to `run` its wall time (the seconds `fn` returns, if any: the part
    it timed itself) and the CPU of `copier` and of the source."""
    source, own = tree_cpu(postmaster), copier()
    started = time.monotonic()
    seconds = fn()
    run.walls.append(time.monotonic() - started if seconds is None else seconds)
    time.sleep(SETTLE)
    run.copier.append(copier() - own)
    run.source.append(tree_cpu(postmaster) - source)


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _duckdb_extension() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("duckdb_extension_postgres")
    if spec is None or spec.origin is None:
        return None
    found = list(Path(spec.origin).parent.rglob("*.duckdb_extension"))
    return str(found[0]) if found else None


def _raw_copy(psql: str, url: str, env: dict[str, str], table: str) -> None:
    subprocess.run(
        [psql, "-X", "-q", url, "-c", f"\\copy {table} TO '/dev/null'"],
        check=True,
        env=env,
    )


def _duckdb_copy(scanner: Path, url: str, target: str, table: str) -> None:
    import duckdb

    db = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    db.execute(f"LOAD '{scanner}'")
    db.execute(f"ATTACH '{url}' AS src (TYPE postgres, READ_ONLY)")
    db.execute(
        f"COPY (SELECT * FROM src.public.{table}) TO '{target}' (FORMAT parquet, COMPRESSION zstd)"
    )
    db.close()


def pgbench_accounts(pgbench: str, url: str, env: dict[str, str], scale: int) -> int:
    """(Re)create pgbench's tables at `scale`, vacuumed and analyzed: pgbench_accounts' rows."""
    subprocess.run(
        [pgbench, "-i", "-q", "-s", str(scale), url],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgbench_accounts")
        row = conn.execute("SELECT count(*) FROM pgbench_accounts").fetchone()
    assert row is not None
    return int(row[0])


APP_TABLE = """
CREATE TABLE app_orders (id bigint PRIMARY KEY, ext uuid NOT NULL,
  created_at timestamptz NOT NULL, status text, amount numeric, price numeric(12,2),
  payload jsonb, tags text[], ip inet, flag boolean)
"""
APP_ROWS = """
INSERT INTO app_orders SELECT g, md5(g::text)::uuid, '2026-01-01'::timestamptz - g * interval '1 s',
  (ARRAY['new', 'paid', 'shipped'])[1 + g % 3], g * 1.37, (g % 100000) / 100.0,
  jsonb_build_object('user', g, 'note', repeat('x', 40), 'items', jsonb_build_array(g, g + 1)),
  ARRAY['a' || g % 10, 'b'], ('10.0.' || g % 256 || '.' || g % 200)::inet, g % 2 = 0
FROM generate_series(1, {rows}) g
"""


def app_orders(url: str, scale: int) -> int:
    """(Re)create `app_orders` with 100,000 rows per scale unit, vacuumed and analyzed."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS app_orders")
        conn.execute(APP_TABLE)
        conn.execute(APP_ROWS.format(rows=scale * 100_000))
        conn.execute("VACUUM ANALYZE app_orders")
        row = conn.execute("SELECT count(*) FROM app_orders").fetchone()
    assert row is not None
    return int(row[0])


def _copy(
    spark: SparkSession,
    catalog: Catalog,
    url: str,
    table: str,
    reader: str = "duckdb",
    local_bytes: int = 0,
) -> tuple[float, int]:
    """streambed's copy of one table under a fresh snapshot: (seconds, rows). The snapshot's
    temporary slot is made and dropped outside the seconds, but inside a measured CPU.

    Each copy goes into a new, empty lake table, as on a first start: copying again into
    a table that holds files is a resync, whose commit also drops the old files (0.03-0.05 s
    more at 1M rows here). The dropped table's files stay in the temporary directory."""
    anchor = SnapshotAnchor.from_temporary_slot(url)
    try:
        info = table_info(anchor.conn, "public", table)
        if catalog.table_exists(("public", table)):
            catalog.drop_table(("public", table))
        lake = lake_table(catalog, info)
        started = time.monotonic()
        result = copy_table(
            spark,
            lake,
            info,
            url=url,
            snapshot=anchor.snapshot_name,
            frontier=anchor.frontier,
            run_id=uuid.uuid4().hex[:12],
            fs_options={},
            reader=reader,
            local_bytes=local_bytes,
        )
        return time.monotonic() - started, result.rows
    finally:
        anchor.close()


def _faster(ours: float, duck: float | None, which: str) -> str:
    """Whether streambed's `which` round beat DuckDB's, and by how much."""
    if duck is None:
        return f"n/a ({which})"
    verdict = "met" if ours < duck else "NOT met"
    return f"{verdict} ({which}: {duck / ours - 1:+.0%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="10,100")
    parser.add_argument("--spark", default="local[2]")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best is reported")
    parser.add_argument("--reader", choices=["duckdb", "csv"], default="duckdb")
    parser.add_argument("--table", choices=["pgbench", "app"], default="pgbench")
    parser.add_argument(
        "--local-bytes",
        type=int,
        help="tables of at most this size are copied in streambed's process (0: all on "
        "Spark; default: STREAMBED_COPY_LOCAL_BYTES's)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    pgbench = str(Path(find_psql() or "/usr/lib/postgresql/15/bin/psql").parent / "pgbench")
    psql = find_psql()
    assert psql is not None, "psql is needed for the raw COPY reference"
    extension = _duckdb_extension()
    with tempfile.TemporaryDirectory(prefix="streambed-bench-") as tmp, ThrowawayPostgres() as pg:
        url = pg.url()
        env = {**os.environ, "PGPASSWORD": pg.password}
        settings = Settings.from_env({"STREAMBED_SOURCE_URL": url, "STREAMBED_DATA_DIR": tmp})
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        local_bytes = settings.copy_local_bytes if args.local_bytes is None else args.local_bytes
        catalog = open_catalog(settings)
        spark = get_spark(args.spark)
        with pg.connect() as conn:
            conn.execute(
                "CREATE TABLE bench_warmup AS SELECT g AS id, repeat('x', 200) AS pad "
                "FROM generate_series(1, 20000) g"
            )
            conn.execute("ALTER TABLE bench_warmup ADD PRIMARY KEY (id)")
            conn.commit()
        scanner: Path | None = None
        if extension is not None:
            # The wheel names the file postgres.duckdb_extension, but its entry point is
            # postgres_scanner_duckdb_cpp_init: load it under that name.
            scanner = Path(tmp) / "postgres_scanner.duckdb_extension"
            scanner.write_bytes(Path(extension).read_bytes())
        print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        duck_target = f"{tmp}/duck.parquet"
        counts: list[int] = []
        table = "app_orders" if args.table == "app" else "pgbench_accounts"

        def ours_copy() -> float:
            seconds, count = _copy(spark, catalog, url, table, args.reader, local_bytes)
            counts.append(count)
            return seconds

        for scale in [int(s) for s in args.scales.split(",")]:
            if args.table == "app":
                rows = app_orders(url, scale)
            else:
                rows = pgbench_accounts(pgbench, url, env, scale)
            with psycopg.connect(url) as conn:
                here = copies_here(table_info(conn, "public", table), local_bytes)
            where = f"{range_threads()} threads of this process" if here else "Spark"
            print(f"{rows:>11,} rows: streambed copies them on {where}", flush=True)
            raw, duck, ours = Run(), Run(), Run()
            postmaster = postmaster_pid(pg.data_dir)
            for _ in range(args.repeat):  # interleaved: each round sees the same load
                _measured(raw, postmaster, _children_cpu, lambda: _raw_copy(psql, url, env, table))
                if scanner is not None:
                    _measured(
                        duck,
                        postmaster,
                        _own_cpu,
                        lambda: _duckdb_copy(scanner, url, duck_target, table),
                    )
                # Warmed each round: Spark stops Python workers idle for a minute.
                warm_seconds, _ = _copy(spark, catalog, url, "bench_warmup", args.reader)
                if local_bytes:  # the threads and connections of copies in this process
                    _copy(spark, catalog, url, "bench_warmup", args.reader, local_bytes)
                _measured(ours, postmaster, lambda: tree_cpu(os.getpid()), ours_copy)
                assert counts[-1] == rows, (counts[-1], rows)
                print(
                    f"  round: warm-up copy {warm_seconds:.1f} s, copy {ours.walls[-1]:.1f} s",
                    flush=True,
                )
            raw_best, ours_best = min(raw.walls), min(ours.walls)
            duck_best = min(duck.walls) if duck.walls else None
            print(
                f"{rows:>11,} rows  raw COPY {rows / raw_best:>11,.0f} rows/s  "
                + (f"duckdb {rows / duck_best:>11,.0f} rows/s  " if duck_best else "duckdb n/a  ")
                + f"streambed {rows / ours_best:>11,.0f} rows/s ({ours_best:.1f} s, "
                f"{ours_best / raw_best:.1f}x raw)",
                flush=True,
            )
            ours_median = statistics.median(ours.walls)
            duck_median = statistics.median(duck.walls) if duck.walls else None
            print(
                f"{'':>11}       medians: raw {rows / statistics.median(raw.walls):,.0f}, "
                + (f"duckdb {rows / duck_median:,.0f}, " if duck_median else "")
                + f"streambed {rows / ours_median:,.0f} rows/s",
                flush=True,
            )
            print(f"{'':>11}       raw: {raw.cpu()}", flush=True)
            if duck.walls:
                print(f"{'':>11}       duckdb: {duck.cpu()}", flush=True)
            print(f"{'':>11}       streambed: {ours.cpu()}", flush=True)
            print(
                f"{'':>11}       targets: >= 1/4 raw "
                + ("met" if ours_best <= 4 * raw_best else "NOT met")
                + ", faster than duckdb "
                + _faster(ours_best, duck_best, "best")
                + ", "
                + _faster(ours_median, duck_median, "median"),
                flush=True,
            )
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        stop_spark()
    if extension is None:
        print("duckdb: the duckdb-extension-postgres wheel is not installed; skipped")


if __name__ == "__main__":
    main()
