"""Initial copy throughput: streambed's Spark copy vs raw COPY and DuckDB's postgres_scanner.

    .venv/bin/python bench/initial_load.py [--scales 10,100] [--spark local[2]]

For each pgbench scale (10 → 1M accounts, 100 → 10M) it creates `pgbench_accounts` in a
throwaway Postgres (`pgbench -i`), then times, on the same machine:

1. raw: `psql -c "\\copy pgbench_accounts TO /dev/null"` (COPY TO STDOUT drained by libpq),
   the limit any client can reach;
2. duckdb: DuckDB 1.5.5's postgres extension (wheel `duckdb-extension-postgres`, loaded
   offline) writing the table to one Parquet file;
3. streambed: the initial copy of one table (temporary-slot snapshot, ctid ranges on a
   warm Spark session, Parquet with field ids, one Iceberg commit).

Rows/s of each is printed; nothing is written outside a temporary directory.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streambed.config import Settings
from streambed.copy.catalog import table_info
from streambed.copy.client import find_psql
from streambed.copy.job import copy_table, lake_table
from streambed.copy.snapshot import SnapshotAnchor
from streambed.lake.catalog import open_catalog
from streambed.merge.spark_session import get_spark, stop_spark
from tests.fixtures.postgres import ThrowawayPostgres


def _timed(fn: object) -> float:
    started = time.monotonic()
    fn()  # type: ignore[operator]
    return time.monotonic() - started


def _duckdb_extension() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("duckdb_extension_postgres")
    if spec is None or spec.origin is None:
        return None
    found = list(Path(spec.origin).parent.rglob("*.duckdb_extension"))
    return str(found[0]) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="10,100")
    parser.add_argument("--spark", default="local[2]")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    pgbench = str(Path(find_psql() or "/usr/lib/postgresql/15/bin/psql").parent / "pgbench")
    psql = find_psql()
    assert psql is not None, "psql is needed for the raw COPY reference"
    extension = _duckdb_extension()
    results = []
    with tempfile.TemporaryDirectory(prefix="streambed-bench-") as tmp, ThrowawayPostgres() as pg:
        url = pg.url()
        env = {**os.environ, "PGPASSWORD": pg.password}
        settings = Settings.from_env({"STREAMBED_SOURCE_URL": url, "STREAMBED_DATA_DIR": tmp})
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        catalog = open_catalog(settings)
        spark = get_spark(args.spark)
        for scale in [int(s) for s in args.scales.split(",")]:
            subprocess.run(
                [pgbench, "-i", "-q", "-s", str(scale), url],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            with pg.connect() as conn:
                conn.execute("VACUUM ANALYZE pgbench_accounts")
                rows = conn.execute("SELECT count(*) FROM pgbench_accounts").fetchone()[0]  # type: ignore[index]
            raw = _timed(
                lambda: subprocess.run(
                    [psql, "-X", "-q", url, "-c", "\\copy pgbench_accounts TO '/dev/null'"],
                    check=True,
                    env=env,
                )
            )
            duck: float | None = None
            if extension is not None:
                import duckdb

                # The wheel names the file postgres.duckdb_extension, but its entry point
                # is postgres_scanner_duckdb_cpp_init: load it under that name.
                scanner = Path(tmp) / "postgres_scanner.duckdb_extension"
                if not scanner.exists():
                    scanner.write_bytes(Path(extension).read_bytes())

                def scan(scanner: Path = scanner, scale: int = scale) -> None:
                    db = duckdb.connect(config={"allow_unsigned_extensions": "true"})
                    db.execute(f"LOAD '{scanner}'")
                    db.execute(f"ATTACH '{url}' AS src (TYPE postgres, READ_ONLY)")
                    db.execute(
                        "COPY (SELECT * FROM src.public.pgbench_accounts) TO "
                        f"'{tmp}/duck-{scale}.parquet' (FORMAT parquet, COMPRESSION zstd)"
                    )
                    db.close()

                duck = _timed(scan)
            for warm in (True, False):  # a small warm-up copy first: Spark's workers start
                table = "pgbench_branches" if warm else "pgbench_accounts"
                anchor = SnapshotAnchor.from_temporary_slot(url)
                try:
                    info = table_info(anchor.conn, "public", table)
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
                    )
                    ours = time.monotonic() - started
                finally:
                    anchor.close()
            assert result.rows == rows, (result.rows, rows)
            results.append((rows, raw, duck, ours))
            print(
                f"{rows:>11,} rows  raw COPY {rows / raw:>11,.0f} rows/s  "
                + (f"duckdb {rows / duck:>11,.0f} rows/s  " if duck else "duckdb n/a  ")
                + f"streambed {rows / ours:>11,.0f} rows/s ({ours:.1f} s, "
                f"{ours / raw:.1f}x raw)",
                flush=True,
            )
        stop_spark()
    if extension is None:
        print("duckdb: the duckdb-extension-postgres wheel is not installed; skipped")


if __name__ == "__main__":
    main()
