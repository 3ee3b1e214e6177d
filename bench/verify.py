"""`streambed verify`'s rate against a raw COPY of the same table.

    .venv/bin/python bench/verify.py [--scale 10] [--repeat 3]

Creates `pgbench_accounts` in a throwaway Postgres (`pgbench -i -s SCALE`: 100,000 rows per
unit; 10 → 1M rows), lets a real `streambed run` copy it into a local lake, then times, with
replication running and idle:

1. raw: `psql -c "\\copy pgbench_accounts TO /dev/null"`, the limit any client reaches;
2. verify: `streambed verify public.pgbench_accounts` as a process (start-up included).

Prints the best of `--repeat` rounds of each (interleaved) in rows per second, and
verify's rate as a fraction of raw's (the goal: at least one half), then where the best
verify run spent its time (its own log: the snapshot taken, the lake at its LSN, the table
compared) and the CPU seconds of its process. Nothing is written outside a temporary
directory.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.initial_load import _raw_copy, pgbench_accounts
from streambed.copy.client import find_psql
from streambed.core.config import Settings
from streambed.state.store import StateStore
from tests.fixtures.postgres import ThrowawayPostgres
from tests.integration.pipeline.harness import StreambedProcess, wait_until

TABLE = "public.pgbench_accounts"


def _ready(settings: Settings) -> bool:
    if not settings.state_path.exists():
        return False
    with StateStore(settings.state_path) as state:
        table = state.table("public", "pgbench_accounts")
    return table is not None and table.status == "ready"


def _timed(run: object) -> float:
    started = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    psql = find_psql()
    assert psql is not None, "psql is needed for the raw COPY reference"
    pgbench = str(Path(psql).parent / "pgbench")
    with tempfile.TemporaryDirectory() as tmp, ThrowawayPostgres() as server:
        server.create_database("bench")
        url = server.url("bench")
        env = {**os.environ, "PGCONNECT_TIMEOUT": "10"}
        rows = pgbench_accounts(pgbench, url, env, args.scale)
        streambed_env = {
            "STREAMBED_SOURCE_URL": url,
            "STREAMBED_DATA_DIR": str(Path(tmp) / "data"),
            "STREAMBED_QUERY_LISTEN": "",
            "STREAMBED_INCLUDE_TABLES": TABLE,
            "STREAMBED_HEARTBEAT_INTERVAL": "1",
            "STREAMBED_LOG_LEVEL": "warning",
        }
        settings = Settings.from_env(streambed_env)
        proc = StreambedProcess(streambed_env, Path(tmp) / "run.log").start()
        try:
            wait_until(lambda: _ready(settings), 1800, "the initial copy", proc)

            outputs: list[tuple[str, float]] = []

            def verify() -> None:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                done = subprocess.run(
                    [sys.executable, "-m", "streambed.cli", "verify", TABLE],
                    env={**os.environ, **streambed_env, "STREAMBED_LOG_LEVEL": "info"},
                    capture_output=True,
                    text=True,
                )
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                assert done.returncode == 0, done.stdout + done.stderr
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                outputs.append((done.stderr + done.stdout, cpu))

            raw: list[float] = []
            checked: list[float] = []
            for _ in range(args.repeat):
                raw.append(_timed(lambda: _raw_copy(psql, url, env, "pgbench_accounts")))
                checked.append(_timed(verify))
        finally:
            proc.stop()
    best_raw, best_verify = min(raw), min(checked)
    print(f"pgbench_accounts: {rows} rows")
    print(f"raw COPY: {best_raw:.2f} s, {rows / best_raw:,.0f} rows/s")
    print(f"verify:   {best_verify:.2f} s, {rows / best_verify:,.0f} rows/s")
    print(f"verify / raw: {best_raw / best_verify:.2f} (goal: at least 0.5)")
    text, cpu = outputs[checked.index(best_verify)]
    print(f"the best verify run: {cpu:.2f} CPU s in its process; its log:")
    for line in text.splitlines():
        if "verify" in line or "rows," in line:
            print("  " + line.strip())


if __name__ == "__main__":
    main()
