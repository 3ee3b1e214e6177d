"""A real Prometheus scrapes a real `streambed run` on loopback: every metric of
docs/metrics.md is there and moves with the work, the query process's counters survive its
restart, and the health endpoints answer."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.postgres import ThrowawayPostgres, free_port
from tests.fixtures.prometheus import ThrowawayPrometheus
from tests.integration.pipeline.harness import StreambedProcess, wait_until

ROWS = 300
TABLE = '{schema="shop",table="items"}'


@dataclass
class Scraped:
    source_url: str
    query_port: int
    metrics_port: int
    run: StreambedProcess
    prometheus: ThrowawayPrometheus

    def value(self, promql: str) -> float | None:
        """The single value `promql` evaluates to, None when it has no sample."""
        results = self.prometheus.query(promql)
        assert len(results) <= 1, results
        return results[0]["value"] if results else None

    def wait_value(self, promql: str, check: str, what: str, timeout: float = 60) -> float:
        """Wait until `promql` has a value `v` for which `eval(check)` holds (scrapes are
        a second apart); returns it."""
        seen: list[float | None] = [None]

        def holds() -> bool:
            seen[0] = v = self.value(promql)
            return v is not None and bool(eval(check, {}, {"v": v}))

        try:
            wait_until(holds, timeout, what, self.run)
        except AssertionError as e:
            raise AssertionError(f"{promql}: last value {seen[0]}, wanted {check}\n{e}") from e
        assert seen[0] is not None
        return seen[0]

    def source(self, *statements: str) -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(
            f"host=127.0.0.1 port={self.query_port} user=streambed dbname=streambed "
            "sslmode=disable connect_timeout=10",
            autocommit=True,
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=10
            ) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:  # not listening yet
            return 0, str(e)


@pytest.fixture(scope="module")
def scraped(
    pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scraped]:
    with pg_server.scratch_database("metrics_") as (name, url):
        yield from _scraped(name, url, tmp_path_factory.mktemp("metrics"))


def _scraped(name: str, url: str, root: Path) -> Iterator[Scraped]:
    """One `streambed run` on the database at `url`, scraped by a Prometheus."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA shop")
        conn.execute("CREATE TABLE shop.items (id int PRIMARY KEY, note text)")
        conn.execute(
            f"INSERT INTO shop.items SELECT g, 'item ' || g FROM generate_series(1, {ROWS}) g"
        )
    query_port, metrics_port = free_port(), free_port()
    run = StreambedProcess(
        {
            "STREAMBED_SOURCE_URL": url,
            "STREAMBED_SLOT": name,  # slots are the cluster's: other tests' runs have theirs
            "STREAMBED_DATA_DIR": str(root / "data"),
            "STREAMBED_FLUSH_INTERVAL": "0.3",
            "STREAMBED_HEARTBEAT_INTERVAL": "1",
            "STREAMBED_SPARK_MASTER": "local[1]",
            "STREAMBED_QUERY_LISTEN": f"127.0.0.1:{query_port}",
            "STREAMBED_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
        },
        root / "run.log",
    )
    prometheus: ThrowawayPrometheus | None = None
    try:
        run.start()
        prometheus = ThrowawayPrometheus([f"127.0.0.1:{metrics_port}"])
        scraped = Scraped(url, query_port, metrics_port, run, prometheus)
        wait_until(lambda: scraped.get("/readyz")[0] == 200, 180, "/readyz", run)
        yield scraped
    finally:
        if prometheus is not None:
            prometheus.stop()
        if run.running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.stop(60)
        run.kill()


def test_health_endpoints_answer_and_unknown_paths_are_404(scraped: Scraped) -> None:
    assert scraped.get("/healthz") == (200, "ok\n")
    assert scraped.get("/readyz") == (200, "ready\n")
    status, body = scraped.get("/nothing-here")
    assert status == 404 and "/metrics" in body
    status, body = scraped.get("/metrics")
    assert status == 200 and "streambed_replication_lag_seconds" in body


def _work(s: Scraped, round_: int) -> None:
    """Inserts, updates and deletes on the source, then queries (one failing) on the
    query server."""
    base = ROWS + round_ * 100
    # new rows only, flushed by themselves: an append
    s.source(
        "INSERT INTO shop.items SELECT g, 'new ' || g "
        f"FROM generate_series({base + 1}, {base + 50}) g"
    )
    rows = _source_count(s)
    s.wait_value(f"streambed_table_rows{TABLE}", f"v == {rows}", "the appended rows")
    # then changes to rows in the lake: a merge
    s.source(
        f"UPDATE shop.items SET note = 'changed {round_}' WHERE id % 10 = {round_}",
        f"DELETE FROM shop.items WHERE id = {round_ + 1}",
    )
    with s.connect() as conn:
        for _ in range(3):
            conn.execute("SELECT count(*) FROM shop.items").fetchone()
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")


def _changes(operation: str) -> str:
    return f'streambed_changes_applied_total{{schema="shop",table="items",operation="{operation}"}}'


def _counters(s: Scraped) -> dict[str, float]:
    names = {
        "inserts": _changes("insert"),
        "updates": _changes("update"),
        "deletes": _changes("delete"),
        "flushes": "streambed_flush_duration_seconds_count",
        "appends": 'streambed_merge_duration_seconds_count{mode="append"}',
        "merges": 'streambed_merge_duration_seconds_count{mode="local"}',
        "commits": "streambed_commit_duration_seconds_count",
        "frontier": f"streambed_table_frontier_lsn{TABLE}",
        "accepted": "streambed_query_connections_accepted_total",
        "queries": "streambed_queries_total",
        "query_seconds": "streambed_query_duration_seconds_count",
        "errors": 'streambed_query_errors_total{sqlstate="22012"}',
    }
    out = {}
    for key, promql in names.items():
        value = s.value(promql)
        out[key] = -1.0 if value is None else value
    return out


def _source_count(s: Scraped) -> int:
    with psycopg.connect(s.source_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM shop.items").fetchone()
    assert row is not None
    return int(row[0])


def test_every_metric_is_scraped_and_moves(scraped: Scraped) -> None:
    s = scraped
    # the initial copy, as the copy progress reported it
    s.wait_value(f"streambed_copy_rows{TABLE}", f"v == {ROWS}", "the copy's rows")
    assert s.wait_value(f"streambed_copy_running{TABLE}", "v == 0", "the copy's end") == 0
    assert s.value(f"streambed_copy_estimated_rows{TABLE}") is not None

    _work(s, 1)
    rows = _source_count(s)
    s.wait_value(f"streambed_table_rows{TABLE}", f"v == {rows}", "the lake's rows")
    s.wait_value('streambed_query_errors_total{sqlstate="22012"}', "v >= 1", "the error")
    s.wait_value(
        _changes("delete"),
        "v >= 1",
        "the delete",
    )
    before = _counters(s)
    assert all(v > 0 for v in before.values()), str(before)

    _work(s, 2)
    rows = _source_count(s)
    s.wait_value(f"streambed_table_rows{TABLE}", f"v == {rows}", "the lake's rows")
    s.wait_value(
        'streambed_query_errors_total{sqlstate="22012"}', f"v > {before['errors']}", "the error"
    )
    s.wait_value(
        _changes("delete"),
        f"v > {before['deletes']}",
        "the second delete",
    )
    after = _counters(s)
    moved = {k: (before[k], after[k]) for k in before if after[k] <= before[k]}
    assert not moved, f"did not move: {moved}"

    assert s.value(f"streambed_table_data_files{TABLE}") >= 1  # type: ignore[operator]
    assert s.value(f"streambed_table_bytes{TABLE}") > 0  # type: ignore[operator]
    # the slot, read every heartbeat (1 s here)
    s.wait_value("streambed_slot_retained_wal_bytes", "v > 0", "the slot's retained WAL")
    assert s.wait_value("streambed_slot_active", "v == 1", "the slot's state") == 1
    assert s.value("streambed_slot_unacknowledged_wal_bytes") is not None
    # idle and caught up: no lag (the heartbeat's keepalives say so)
    s.wait_value("streambed_replication_lag_seconds", "v == 0", "no lag once idle")
    assert s.value("streambed_streaming") == 1
    assert s.value("streambed_query_server_up") == 1
    assert s.value("process_resident_memory_bytes") > 0  # type: ignore[operator]
    # a connection held open is counted while it is open
    with s.connect():
        s.wait_value("streambed_query_connections", "v >= 1", "the open connection")


def _query_child(run: StreambedProcess) -> int:
    assert run.proc is not None
    children = Path(f"/proc/{run.proc.pid}/task/{run.proc.pid}/children").read_text().split()
    for pid in children:
        with contextlib.suppress(OSError):
            if b"streambed.server.process" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return int(pid)
    raise AssertionError(f"no query process among {children}")


def test_query_counters_survive_a_killed_query_process(scraped: Scraped) -> None:
    s = scraped
    with s.connect() as conn:
        conn.execute("SELECT 1").fetchone()
    queries = s.wait_value("streambed_queries_total", "v >= 1", "a query")
    restarts = s.value("streambed_query_server_restarts_total") or 0.0
    os.kill(_query_child(s.run), signal.SIGKILL)
    s.wait_value("streambed_query_server_restarts_total", f"v == {restarts + 1}", "the restart")
    wait_until(lambda: s.get("/readyz")[0] == 200, 60, "ready again", s.run)
    with s.connect() as conn:
        conn.execute("SELECT 1").fetchone()
    # the dead process's count is kept, the new one's added: no reset
    s.wait_value("streambed_queries_total", f"v > {queries}", "the queries after the restart")
    assert s.value("resets(streambed_queries_total[5m])") == 0


def test_a_metrics_port_in_use_stops_the_start_with_the_query_ports_error(
    tmp_path: Path,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "streambed.cli", "run"],
            env={
                **os.environ,
                "STREAMBED_SOURCE_URL": "postgresql://nobody@127.0.0.1:1/none",
                "STREAMBED_DATA_DIR": str(tmp_path / "data"),
                "STREAMBED_QUERY_LISTEN": "",
                "STREAMBED_METRICS_LISTEN": f"127.0.0.1:{port}",
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert (
        f"STREAMBED_METRICS_LISTEN=127.0.0.1:{port}: the metrics endpoint cannot listen there "
        "(Address already in use)"
    ) in done.stderr
    assert not (tmp_path / "data").exists()  # nothing started
