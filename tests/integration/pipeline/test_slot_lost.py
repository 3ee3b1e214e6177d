"""The slot no longer holds what the lake needs: dropped (by hand, or a failover to a server
without it) or invalidated by the source (`max_slot_wal_keep_size`). The next start copies
every table again, so the lake equals the source; a running process stops rather than
retry a slot that can never stream again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.postgres import PgDatabase, ThrowawayPostgres
from tests.integration.pipeline.conftest import Deployment, deployment
from tests.integration.pipeline.harness import (
    slot_wal_status,
    wait_lake_equals_source,
    wait_until,
)
from tests.integration.pipeline.test_replication import SCHEMA, TABLES, execute, start

pytestmark = pytest.mark.integration

COPIED_AGAIN = "every table is copied again"
CHANGES = (
    "UPDATE ints SET name = 'later' WHERE id % 3 = 0",
    "DELETE FROM pairs WHERE a = 2",
    "INSERT INTO ints SELECT g, 'later', g, now() FROM generate_series(2001, 2500) g",
    "UPDATE ints SET id = id + 10000 WHERE id BETWEEN 10 AND 20",
    "INSERT INTO shop.words VALUES ('later', 7, 'x')",
)


def _fill(d: Deployment) -> None:
    """The schema and rows, streamed into the lake by a first run that then stops."""
    execute(d.url, SCHEMA)
    start(d)
    execute(
        d.url,
        "INSERT INTO ints SELECT g, 'v1', g, now() FROM generate_series(1, 2000) g",
        "INSERT INTO pairs SELECT g % 10, 'k' || g, 'v1' FROM generate_series(1, 300) g",
        "INSERT INTO shop.words SELECT 'w' || g, g, 'v1' FROM generate_series(1, 100) g",
    )
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)


def _cli(d: Deployment, *args: str) -> str:
    """A `streambed` command's output (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-m", "streambed.cli", *args],
        env=d.proc.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _status(d: Deployment) -> str:
    return _cli(d, "status")


def test_a_dropped_slot_copies_every_table_again(local_deployment: Deployment) -> None:
    """Before, the new slot's stream started at its creation and the tables kept their
    frontiers: the changes made while no slot existed were silently missing."""
    d = local_deployment
    _fill(d)
    assert d.proc.stop() == 0
    shown = _status(d)
    assert all(f"{t:40} ready" in shown for t in TABLES), shown
    assert "slot streambed: idle, wal_status reserved, " in shown
    execute(d.url, "SELECT pg_drop_replication_slot('streambed')", *CHANGES)
    assert "slot streambed: missing: the next start creates it and copies every table again" in (
        _status(d)
    )
    # Killed right after the slot is created: the next start finds the slot, so the tables
    # must have been marked for copying before it was made.
    d.proc.start({"STREAMBED_FAILPOINTS": "after_slot_created"})
    assert d.proc.wait(timeout=120) == -signal.SIGKILL
    start(d)
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    logs = d.proc.logs()
    assert COPIED_AGAIN in logs
    assert "the earlier slot was dropped" in logs
    # Streaming goes on from the new slot.
    execute(d.url, "UPDATE pairs SET v = 'after' WHERE a = 5")
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    assert d.proc.stop() == 0


@pytest.fixture
def small_wal_server() -> Iterator[ThrowawayPostgres]:
    """A server that keeps at most 32 MB of WAL for a slot (its own: the setting would
    invalidate the other tests' slots too)."""
    with ThrowawayPostgres(
        settings={"max_slot_wal_keep_size": "32MB", "max_wal_size": "32MB", "min_wal_size": "32MB"}
    ) as server:
        yield server


def _invalidate_slot(server: ThrowawayPostgres, url: str) -> None:
    """Write WAL and checkpoint until the source invalidates the slot. The WAL is written
    in another database, whose changes the slot's decoding skips: nothing is sent to a
    paused client, whose full socket would keep its walsender from ending."""
    server.create_database("fill")
    with psycopg.connect(server.url("fill"), autocommit=True) as conn:
        for _ in range(40):
            for _ in range(16):
                conn.execute("SELECT pg_logical_emit_message(false, 'fill', repeat('x', 1 << 20))")
            conn.execute("CHECKPOINT")
            if slot_wal_status(url) == "lost":
                return
    raise AssertionError(f"the slot was not invalidated: wal_status {slot_wal_status(url)}")


def test_an_invalidated_slot_stops_the_run_and_the_next_start_copies_again(
    small_wal_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    """The process is paused (as a stalled or overloaded one would be) while the source
    writes more WAL than the slot may keep: the source invalidates the slot and ends its
    walsender. Before, streambed then retried `cannot read from logical replication slot`
    forever, saying to check host and port."""
    d = deployment(PgDatabase(small_wal_server, "postgres"), tmp_path)
    d.proc.new_session = True
    try:
        _fill(d)
        assert d.proc.proc is not None
        os.kill(d.proc.proc.pid, signal.SIGSTOP)
        try:
            execute(d.url, *CHANGES)
            _invalidate_slot(small_wal_server, d.url)
        finally:
            os.kill(d.proc.proc.pid, signal.SIGCONT)
        assert d.proc.wait(timeout=120) == 3
        logs = d.proc.logs()
        assert "This slot has been invalidated" in logs
        assert "it replaces the invalidated slot and copies every table again" in logs
        assert "source not ready, retrying" not in logs

        d.proc.start()
        wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
        logs = d.proc.logs()
        assert "replication slot invalidated by the source; dropping it" in logs
        assert "the source invalidated the earlier slot" in logs
        assert slot_wal_status(d.url) in ("reserved", "extended")
        execute(d.url, "DELETE FROM ints WHERE id < 100")
        wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
        assert d.proc.stop() == 0
    finally:
        d.proc.kill()


def test_a_slot_invalidated_while_stopped_is_replaced_at_start(
    small_wal_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    d = deployment(PgDatabase(small_wal_server, "postgres"), tmp_path)
    try:
        _fill(d)
        assert d.proc.stop() == 0
        assert "more before the source may invalidate it" in _status(d)
        execute(d.url, *CHANGES)
        _invalidate_slot(small_wal_server, d.url)
        assert "invalidated by the source (max_slot_wal_keep_size)" in _status(d)
        d.proc.start()
        wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
        assert COPIED_AGAIN in d.proc.logs()
        wait_until(lambda: slot_wal_status(d.url) != "lost", 30, "a new slot", d.proc)
        assert d.proc.stop() == 0
    finally:
        d.proc.kill()


def test_a_copy_holding_the_slot_near_its_limit_is_warned_about_in_time(
    small_wal_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    """A table's copy holds the slot until it commits (here a resync whose copy waits for
    a lock): while the source writes WAL, the warning comes before the slot is lost, and
    `streambed status` shows it too. The copy then commits and the slot streams on."""
    d = deployment(PgDatabase(small_wal_server, "postgres"), tmp_path)
    d.proc.env["STREAMBED_HEARTBEAT_INTERVAL"] = "1"  # the slot is read at each heartbeat
    small_wal_server.create_database("fill")
    try:
        _fill(d)
        with psycopg.connect(d.url) as blocker, psycopg.connect(small_wal_server.url("fill")) as w:
            w.autocommit = True
            blocker.execute("LOCK TABLE ints IN ACCESS EXCLUSIVE MODE")  # the copy waits
            _cli(d, "resync", "public.ints")
            wait_until(lambda: "resync requested" in d.proc.logs(), 60, "the resync", d.proc)
            execute(d.url, *[c for c in CHANGES if "ints" not in c])  # held by the copy
            for _ in range(24):  # 4 MB at a time, up to 96 MB: the limit is 32 MB
                for _ in range(4):
                    w.execute("SELECT pg_logical_emit_message(false, 'fill', repeat('x', 1 << 20))")
                w.execute("CHECKPOINT")
                if "raise max_slot_wal_keep_size on the source now" in d.proc.logs():
                    break
                time.sleep(1.5)  # a slot check
            else:
                raise AssertionError(
                    "no warning before 96 MB of WAL: " + _status(d) + d.proc.logs()[-3000:]
                )
            assert slot_wal_status(d.url) != "lost"
            assert "warning: slot streambed holds" in _status(d)
            blocker.rollback()
        execute(d.url, *[c for c in CHANGES if "ints" in c])
        wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
        assert slot_wal_status(d.url) != "lost"
        assert d.proc.running
        assert d.proc.stop() == 0
    finally:
        d.proc.kill()
