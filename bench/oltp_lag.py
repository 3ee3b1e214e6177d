"""OLTP lag: how far the lake trails the source under a steady pgbench TPC-B load.

    PYTHONPATH=. .venv/bin/python bench/oltp_lag.py [--scale 20] [--seconds 300]
                                                    [--clients 2] [--tree DIR]

A throwaway Postgres 15 gets `pgbench -i -s <scale>` and a small probe table
(`lag_probe`), all in one publication. `streambed run` starts as a user would (a new
process, new data directory, the query server on a free port, Spark `local[2]` if a merge
needs it) and copies the tables; once the query port shows them, pgbench runs TPC-B at full
speed (`-c <clients> -j <clients>`) for `--seconds`.

The lag is measured by a probe: one thread commits a marker row into `lag_probe` every
0.5 s (its own connection, beside pgbench's load) and notes when; another asks the query
port for `max(id)` every 0.1 s. A marker's lag is the time from its commit to the first
answer that shows it. After pgbench stops, one more marker is committed: the catch-up time
is from pgbench's end until that marker (committed after every pgbench transaction) is
visible. Goal: p99 < 10 s during the run, catch-up < 10 s.

It also prints pgbench's transactions/s, the flushes from streambed's log (count, changes,
seconds; per table how each was written: appended, merged here or on Spark, and how long
the write, the Iceberg commit and snapshot expiry took; the log runs at debug level for
this), the time from a flush's end to the query port showing it, and checks at the end
that the lake's `pgbench_accounts` balance sum and `pgbench_history` row count equal the
source's. `--tree` runs the streambed of another checkout (e.g. a worktree of an older
commit) with this script. Nothing is written outside a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.initial_load import pgbench_accounts
from streambed.copy.client import find_psql
from tests.fixtures.postgres import ThrowawayPostgres, free_port

PROBE_EVERY = 0.5
POLL_EVERY = 0.1
GOAL_SECONDS = 10.0
TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")


class Probe:
    """Markers committed to the source, and when the query port first showed each."""

    def __init__(self, source_url: str, query_url: str) -> None:
        self.source_url = source_url
        self.query_url = query_url
        self.committed: dict[int, float] = {}  # marker id → monotonic commit time
        self.seen: dict[int, float] = {}  # marker id → monotonic time first visible
        self.seen_wall: dict[int, float] = {}  # the same, as a Unix time
        self._next = 1
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None
        self._closing = False

    def start(self) -> None:
        self._source = psycopg.connect(self.source_url, autocommit=True)
        for target in (self._write_loop, self._read_loop):
            thread = threading.Thread(target=self._guard, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def mark(self) -> int:
        """Commit one marker; its id."""
        with self._lock:
            marker = self._next
            self._next += 1
            self._source.execute("INSERT INTO lag_probe VALUES (%s, now())", (marker,))
            self.committed[marker] = time.monotonic()
        return marker

    def stop_writing(self) -> None:
        self._stop.set()
        self._threads[0].join()

    def wait_visible(self, marker: int, timeout: float) -> float | None:
        """Monotonic time `marker` became visible, or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            if marker in self.seen:
                return self.seen[marker]
            time.sleep(POLL_EVERY)
        return None

    def close(self) -> None:
        self._stop.set()
        self._closing = True
        for thread in self._threads:
            thread.join(10)
        self._source.close()

    def check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"probe failed: {self._error}") from self._error

    def _guard(self, target: object) -> None:
        try:
            target()  # type: ignore[operator]
        except BaseException as e:  # reported by check()
            self._error = e

    def _write_loop(self) -> None:
        while not self._stop.wait(PROBE_EVERY):
            self.mark()

    def _read_loop(self) -> None:
        with psycopg.connect(self.query_url, autocommit=True) as query:
            while not self._closing:
                row = query.execute("SELECT max(id) FROM lag_probe").fetchone()
                now, wall = time.monotonic(), time.time()
                top = int(row[0]) if row and row[0] is not None else 0
                with self._lock:
                    for marker in self.committed:
                        if marker <= top and marker not in self.seen:
                            self.seen[marker] = now
                            self.seen_wall[marker] = wall
                time.sleep(POLL_EVERY)

    def lags(self, since: float, until: float) -> list[float]:
        """Lags of the markers committed in [since, until] (unseen ones: until now)."""
        now = time.monotonic()
        return [
            self.seen.get(m, now) - at for m, at in self.committed.items() if since <= at <= until
        ]


def start_streambed(
    tree: Path, url: str, data: Path, query_port: int, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], Path]:
    log_path = data / "streambed.log"
    run_env = {
        **env,
        "STREAMBED_SOURCE_URL": url,
        "STREAMBED_DATA_DIR": str(data / "lake"),
        "STREAMBED_SPARK_MASTER": "local[2]",
        "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{query_port}",
        "STREAMBED_LOG_LEVEL": "debug",
        "PYTHONPATH": str(tree),
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "streambed.cli", "run"],
            env=run_env,
            cwd=tree,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return process, log_path


def wait_copied(process: subprocess.Popen[bytes], log_path: Path, query_url: str) -> float:
    """Seconds until every table is copied and the query port answers for all of them."""
    started = time.monotonic()
    while time.monotonic() - started < 900:
        if process.poll() is not None:
            raise SystemExit(f"streambed exited ({process.returncode}):\n{_tail(log_path)}")
        copied = set(re.findall(r"copy committed.*?table=public\.(\w+)", log_path.read_text()))
        if copied >= {*TABLES, "lag_probe"}:
            try:
                with psycopg.connect(query_url, autocommit=True, connect_timeout=5) as conn:
                    for table in (*TABLES, "lag_probe"):
                        conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                return time.monotonic() - started
            except psycopg.Error:
                pass
        time.sleep(0.5)
    raise SystemExit(f"the initial copy did not finish in 900 s:\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run_pgbench(pgbench: str, url: str, env: dict[str, str], seconds: int, clients: int) -> str:
    result = subprocess.run(
        [pgbench, "-n", "-T", str(seconds), "-c", str(clients), "-j", str(clients), url],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _stamp(line: str) -> float:
    text = line.split(" ", 1)[0].rstrip("Z")
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", line))


def report_log(log_path: Path, since_wall: float, until_wall: float, probe: Probe) -> None:
    """Flushes in [since_wall, until_wall] from streambed's log, and the refresh delay."""
    flushes: list[tuple[float, int, float]] = []  # (end, changes, seconds)
    applied: dict[str, list[dict[str, str]]] = defaultdict(list)
    catching_up = 0
    for line in log_path.read_text(errors="replace").splitlines():
        if not line[:4].isdigit():
            continue
        at = _stamp(line)
        if not since_wall <= at <= until_wall:
            continue
        fields = _fields(line)
        if " streambed.pipeline flushed " in line:
            flushes.append((at, int(fields["changes"]), float(fields["seconds"])))
        elif " streambed.lake.sink applied " in line:
            applied[fields["table"]].append(fields)
        elif " streambed.pipeline catching up" in line:
            catching_up += 1
    if not flushes:
        print("  no flushes in the log")
        return
    seconds = [f[2] for f in flushes]
    changes = [f[1] for f in flushes]
    span = until_wall - since_wall
    print(
        f"  flushes: {len(flushes)} ({len(flushes) / span:.2f}/s), changes per flush "
        f"p50 {statistics.median(changes):,.0f} max {max(changes):,}; seconds per flush "
        f"p50 {statistics.median(seconds):.2f} max {max(seconds):.2f}; the loop flushed "
        f"{sum(seconds) / span:.0%} of the time; 'catching up' logged {catching_up} times"
    )
    for table, rows in sorted(applied.items()):
        modes: dict[str, int] = defaultdict(int)
        for row in rows:
            modes[row["mode"]] += 1
        write = [float(r["write_seconds"]) for r in rows]
        commit = [float(r["commit_seconds"]) for r in rows]
        expire = [float(r["expire_seconds"]) for r in rows]
        rewrite = [int(r["rewrite_bytes"]) for r in rows if r["mode"] != "append"]
        mode_text = ", ".join(f"{n} {mode}" for mode, n in sorted(modes.items()))
        print(
            f"  {table}: {len(rows)} writes ({mode_text}); write p50 "
            f"{statistics.median(write):.3f} s max {max(write):.3f}; commit p50 "
            f"{statistics.median(commit):.3f} s max {max(commit):.3f}; expire max "
            f"{max(expire):.3f} s"
            + (f"; rewrites {statistics.median(rewrite) / 1e6:.1f} MB p50" if rewrite else "")
        )
    ends = sorted(f[0] for f in flushes)
    delays = []
    for wall in probe.seen_wall.values():
        before = [end for end in ends if end <= wall]
        if before and since_wall <= wall <= until_wall:
            delays.append(wall - before[-1])
    if delays:
        print(
            f"  flush end → visible on the query port (includes the 0.1 s poll): p50 "
            f"{statistics.median(delays):.2f} s max {max(delays):.2f} s"
        )


def check_equal(source_url: str, query_url: str) -> str:
    sql = (
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts), "
        "(SELECT count(*) FROM pgbench_history)"
    )
    with psycopg.connect(source_url) as src, psycopg.connect(query_url) as lake:
        want = src.execute(sql).fetchone()
        got = lake.execute(sql).fetchone()
    want_t = tuple(int(v) for v in want or ())
    got_t = tuple(int(v) for v in got or ())
    verdict = "equal" if want_t == got_t else "DIFFERENT"
    return f"source {want_t}, lake {got_t}: {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--log", type=Path, help="copy streambed's log (debug level) here")
    args = parser.parse_args()
    psql = find_psql()
    assert psql is not None, "psql is needed for pgbench"
    pgbench = str(Path(psql).parent / "pgbench")
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory(prefix="streambed-bench-") as tmp:
        url = pg.url()
        env = {**os.environ, "PGPASSWORD": pg.password}
        rows = pgbench_accounts(pgbench, url, env, args.scale)
        pg.psql("CREATE TABLE lag_probe (id bigint PRIMARY KEY, committed_at timestamptz)")
        pg.psql("CREATE PUBLICATION streambed FOR ALL TABLES")
        port = free_port()
        query_url = f"host=127.0.0.1 port={port} dbname=streambed user=bench"
        load = os.getloadavg()
        print(
            f"pgbench -s {args.scale} ({rows:,} accounts); streambed from {args.tree}; "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
            flush=True,
        )
        process, log_path = start_streambed(args.tree, url, Path(tmp), port, env)
        probe = None
        try:
            copied = wait_copied(process, log_path, query_url)
            print(f"initial copy visible on the query port {copied:.1f} s after the start")
            probe = Probe(url, query_url)
            probe.start()
            time.sleep(3 * PROBE_EVERY)  # a few idle markers first
            started, started_wall = time.monotonic(), time.time()
            output = run_pgbench(pgbench, url, env, args.seconds, args.clients)
            ended = time.monotonic()
            probe.stop_writing()
            last = probe.mark()
            visible = probe.wait_visible(last, 1800)
            done_wall = time.time()
            tps = re.search(r"tps = ([\d.]+) \(without initial", output)
            lags = probe.lags(started, ended)
            print(
                f"pgbench TPC-B -c {args.clients} -j {args.clients} for {args.seconds} s: "
                f"{float(tps.group(1)) if tps else float('nan'):,.0f} tx/s; "
                f"load average {os.getloadavg()[0]:.2f} at its end"
            )
            p99 = _quantile(lags, 0.99)
            print(
                f"lag during the run ({len(lags)} markers): p50 {statistics.median(lags):.1f} s, "
                f"p99 {p99:.1f} s, max {max(lags):.1f} s"
            )
            windows = []
            for start in range(0, args.seconds, 30):
                part = probe.lags(started + start, min(started + start + 30, ended))
                if part:
                    windows.append(f"{start}-{min(start + 30, args.seconds)} s: {max(part):.1f}")
            print(f"  max lag by 30 s of the run: {'; '.join(windows)}")
            catch_up = None if visible is None else visible - ended
            print(
                "catch-up after pgbench stopped: "
                + ("not visible after 1800 s" if catch_up is None else f"{catch_up:.1f} s")
            )
            report_log(log_path, started_wall, done_wall, probe)
            print(f"lake vs source at the end: {check_equal(url, query_url)}")
            meets = (
                f"goal p99 < {GOAL_SECONDS:.0f} s: {'met' if p99 < GOAL_SECONDS else 'NOT met'}"
                f"; catch-up < {GOAL_SECONDS:.0f} s: "
                + ("met" if catch_up is not None and catch_up < GOAL_SECONDS else "NOT met")
            )
            print(meets)
        finally:
            if probe is not None:
                probe.close()
            process.send_signal(signal.SIGINT)
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if args.log is not None:
                shutil.copyfile(log_path, args.log)


if __name__ == "__main__":
    main()
