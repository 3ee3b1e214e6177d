"""The initial copy sewn to the stream: lake == source while a writer keeps changing tables
during the first start's copy, for a table added while streaming, and across a SIGKILL."""

from __future__ import annotations

import contextlib
import random
import signal
import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest

from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import wait_lake_equals_source, wait_until

pytestmark = pytest.mark.integration

ROWS = 60_000
TABLES = ["public.big_a", "public.big_b", "shop.big_c"]


def _schema(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA shop")
        for table in TABLES:
            conn.execute(
                f"CREATE TABLE {table} (id int PRIMARY KEY, name text, amount numeric(12,2), "
                "at timestamptz, note text)"
            )
            conn.execute(
                f"INSERT INTO {table} SELECT g, 'n' || g, g * 1.5, "
                "'2024-01-01'::timestamptz + g * interval '1 minute', "
                "CASE WHEN g % 7 = 0 THEN NULL WHEN g % 11 = 0 THEN '' "
                "ELSE E'line\\n\"q\",' || g END "
                f"FROM generate_series(1, {ROWS}) g"
            )
        conn.execute("ANALYZE")


class Writer(threading.Thread):
    """Inserts, updates (also of keys), deletes in the given tables until stopped."""

    def __init__(self, url: str, tables: list[str], first_id: int = ROWS * 10) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.tables = tables
        self.first_id = first_id  # above every key the tables start with
        self.halt = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(7)
        next_id = self.first_id
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self.halt.is_set():
                    table = rng.choice(self.tables)
                    with conn.transaction():
                        for _ in range(rng.randint(1, 20)):
                            op = rng.random()
                            key = rng.randint(1, ROWS)
                            if op < 0.35:
                                next_id += 1
                                conn.execute(
                                    f"INSERT INTO {table} VALUES (%s, 'w', 1, now(), 'ins')",
                                    (next_id,),
                                )
                            elif op < 0.7:
                                conn.execute(
                                    f"UPDATE {table} SET name = 'u' || %s, amount = amount + 1 "
                                    "WHERE id = %s",
                                    (self.transactions, key),
                                )
                            elif op < 0.85:
                                next_id += 1
                                conn.execute(
                                    f"UPDATE {table} SET id = %s WHERE id = %s", (next_id, key)
                                )
                            else:
                                conn.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
                    self.transactions += 1
                    # Paced: the lake must be able to catch up on a shared 2-core machine.
                    self.halt.wait(0.05)
        except BaseException as e:  # reported by the test
            self.error = e

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        assert self.error is None, self.error

    def __enter__(self) -> Writer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _statuses(d: Deployment) -> dict[str, str]:
    """Read-only, so the running process never waits for the test."""
    uri = f"file:{d.settings.state_path}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as conn:
            rows = conn.execute("SELECT schema, name, status FROM tables").fetchall()
    except sqlite3.OperationalError:
        return {}
    return {f"{schema}.{name}": status for schema, name, status in rows}


def _all_ready(d: Deployment, tables: list[str]) -> bool:
    if not d.settings.state_path.exists():
        return False
    statuses = _statuses(d)
    return all(statuses.get(t) == "ready" for t in tables)


def test_first_start_copies_while_a_writer_changes_every_table(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _schema(d.url)
    with Writer(d.url, TABLES) as writer:
        d.proc.start()
        wait_until(lambda: _all_ready(d, TABLES), 240, "every table copied", d.proc)
    assert writer.transactions > 10
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    logs = d.proc.logs()
    assert "copy committed" in logs and "rows/s" in logs
    assert d.proc.stop() == 0


def test_table_added_while_streaming_is_copied_with_its_own_seam(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _schema(d.url)
    d.proc.start()
    wait_until(lambda: _all_ready(d, TABLES), 240, "every table copied", d.proc)
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE late (id int PRIMARY KEY, name text, amount numeric(12,2), "
            "at timestamptz, note text)"
        )
        conn.execute(
            f"INSERT INTO late SELECT g, 'v' || g, g, now(), NULL FROM generate_series(1, {ROWS}) g"
        )
    everything = [*TABLES, "public.late"]
    with Writer(d.url, everything):
        wait_until(lambda: _all_ready(d, everything), 240, "the new table copied", d.proc)
    wait_lake_equals_source(d.settings, d.url, everything, d.proc, timeout=180)
    assert d.proc.stop() == 0


def test_sigkill_during_copy_then_restart_redoes_only_unfinished_tables(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _schema(d.url)
    with Writer(d.url, TABLES):
        d.proc.start({"STREAMBED_FAILPOINTS": "during_copy:2"})
        assert d.proc.wait(timeout=300) == -signal.SIGKILL, d.proc.logs()[-3000:]
        statuses = _statuses(d)
        # Two tables copy at once: the first to pass the failpoint commits while the second
        # may already reach it, so the kill can come before or after the first is `ready`.
        assert sorted(statuses.values()).count("ready") <= 1, statuses
        assert "copying" in statuses.values(), statuses
        # Files of the interrupted copies exist but are not part of any table yet.
        leftovers = list(Path(d.settings.data_dir).rglob("copy-*/*.parquet"))
        assert leftovers
        ready_before = [t for t, status in statuses.items() if status == "ready"]
        first_run_log = len(d.proc.logs())
        d.proc.start()
        wait_until(lambda: _all_ready(d, TABLES), 240, "every table copied", d.proc)
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    second_run = d.proc.logs()[first_run_log:]
    assert "interrupted copy removed" in second_run
    started = [line for line in second_run.splitlines() if "copy started" in line]
    assert started  # at least the table the kill interrupted
    for table in ready_before:  # only the unfinished tables are copied again
        assert not any(table in line for line in started), (table, started)
    assert d.proc.stop() == 0
