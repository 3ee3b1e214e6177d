"""CPU of an idle `streambed run`: one 1,000-row table, no writes.

    PYTHONPATH=. .venv/bin/python -m bench.idle_cpu [--seconds 20] [--flush-interval 0.5] [--serve]

Starts a throwaway Postgres with one 1,000-row table, runs `streambed run` until the table
is copied and streaming, waits a few seconds, then reads the process's CPU seconds (all
threads, and its main thread: the replication loop) from /proc over `--seconds` with no
writes to the source. `--flush-interval` is STREAMBED_FLUSH_INTERVAL (a loop that waits for
the flush deadline when nothing is buffered spins whenever the interval is shorter than the
copy manager's 2 s poll). `--serve` also runs the query server on a free port.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.cpu import TICKS
from streambed.core.config import Settings
from streambed.state.store import StateStore
from tests.fixtures.postgres import ThrowawayPostgres, free_port


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name (threads of one name summed) of a live process."""
    found: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if task.name == str(pid):
            name = "main"
        found[name] = found.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS
    return found


def ready(settings: Settings) -> bool:
    if not settings.state_path.exists():
        return False
    store = StateStore(settings.state_path)
    try:
        tables = store.tables()
        return bool(tables) and all(t.status == "ready" for t in tables)
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--flush-interval", type=float, default=0.5)
    parser.add_argument("--serve", action="store_true", help="run the query server too")
    args = parser.parse_args()
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory() as data_dir:
        pg.psql(
            "CREATE TABLE idle (id int PRIMARY KEY, v text); "
            "INSERT INTO idle SELECT g, 'v' || g FROM generate_series(1, 1000) g"
        )
        env = {
            **os.environ,
            "STREAMBED_SOURCE_URL": pg.url(),
            "STREAMBED_DATA_DIR": data_dir,
            "STREAMBED_FLUSH_INTERVAL": str(args.flush_interval),
            "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{free_port()}" if args.serve else "",
        }
        settings = Settings.from_env(env)
        log_path = Path(data_dir) / "streambed.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "streambed.cli", "run"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 180
            while not ready(settings):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"streambed did not get ready:\n{log_path.read_text()}")
                time.sleep(0.5)
            time.sleep(5)  # let the first flushes and heartbeats pass
            before = thread_cpu(proc.pid)
            time.sleep(args.seconds)
            after = thread_cpu(proc.pid)
        finally:
            proc.terminate()
            proc.wait(60)
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    total = sum(used.values())
    serving = "on" if args.serve else "off"
    print(
        f"idle streambed run, {args.seconds:.0f} s, flush interval {args.flush_interval} s, "
        f"query server {serving}"
    )
    print(f"  CPU seconds, every thread: {total:.2f} ({100 * total / args.seconds:.1f}% of a core)")
    print(f"  CPU seconds, main thread:  {used.get('main', 0.0):.2f}")
    for name, seconds in sorted(used.items(), key=lambda item: -item[1])[:5]:
        print(f"    {name:<20} {seconds:.2f}")


if __name__ == "__main__":
    main()
