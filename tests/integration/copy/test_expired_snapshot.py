"""A copy whose snapshot expires before its tasks import it (the `expire_copy_snapshot`
failpoint ends the anchor's transaction), or one of whose tasks has its backend terminated
while it reads, is reported, copied again under a new snapshot, and exact; the other tables
keep streaming meanwhile. One that keeps expiring fails with the command to run, and that
command copies it."""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.integration.copy.test_initial_copy import (
    ROWS,
    TABLES,
    Writer,
    _all_ready,
    _schema,
    _statuses,
)
from tests.integration.copy.test_resync import _resync
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import (
    copy_task_reading,
    wait_lake_equals_source,
    wait_until,
)

pytestmark = pytest.mark.integration

EXPIRED = "the copy's snapshot expired before its tasks imported it"
LOST = "a copy task lost its connection to the source"


def _copies_started(d: Deployment, table: str) -> int:
    return sum(1 for line in d.proc.logs().splitlines() if "copy started" in line and table in line)


def test_a_table_added_while_streaming_whose_snapshot_expires_is_copied_again(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _schema(d.url)
    # Hit 1: the first start's batch; hit 2: the batch of the table added later.
    d.proc.start({"STREAMBED_FAILPOINTS": "expire_copy_snapshot:2"})
    wait_until(lambda: _all_ready(d, TABLES), 240, "every table copied", d.proc)
    assert EXPIRED not in d.proc.logs()
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
        wait_until(lambda: EXPIRED in d.proc.logs(), 240, "the expiry reported", d.proc)
        wait_until(lambda: _all_ready(d, everything), 240, "the new table copied", d.proc)
    logs = d.proc.logs()
    expired = [line for line in logs.splitlines() if EXPIRED in line]
    assert len(expired) == 1, expired
    assert "public.late" in expired[0] and "invalid snapshot identifier" in expired[0]
    assert "2 of 3" in expired[0]
    assert _copies_started(d, "public.late") == 2
    for table in TABLES:  # never blocked: copied once at the start, streamed since
        assert _copies_started(d, table) == 1, table
    wait_lake_equals_source(d.settings, d.url, everything, d.proc, timeout=240)
    assert d.proc.stop() == 0


class _Terminator(threading.Thread):
    """Terminates the backend of the first copy task seen reading `table` (its COPY
    running), as an administrator's `pg_terminate_backend` would."""

    def __init__(self, url: str, table: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.table = table
        self.halt = threading.Event()
        self.terminated = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._watch()
        except BaseException as e:  # reported by the test
            self.error = e

    def _watch(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.halt.is_set():
                pid = copy_task_reading(conn, self.table)
                if pid is not None:
                    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    self.terminated = True
                    return
                self.halt.wait(0.02)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


def test_a_copy_task_whose_backend_is_terminated_is_copied_again(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO kept SELECT g, 'v' || g FROM generate_series(1, 500) g")
        conn.execute("CREATE TABLE cut (id int PRIMARY KEY, v text, pad text)")
        conn.execute(
            "INSERT INTO cut SELECT g, 'v' || g, repeat('x', 100) "
            "FROM generate_series(1, 1000000) g"
        )
        conn.execute("ANALYZE")
    terminator = _Terminator(d.url, "cut")
    terminator.start()
    try:
        d.proc.start()
        wait_until(lambda: _all_ready(d, ["public.kept", "public.cut"]), 300, "both copied", d.proc)
    finally:
        terminator.stop()
    assert terminator.error is None, terminator.error
    assert terminator.terminated
    lost = [line for line in d.proc.logs().splitlines() if LOST in line]
    assert len(lost) == 1, lost
    assert "public.cut" in lost[0]
    # Postgres's FATAL message, or what libpq says when it reads the closed socket first.
    assert "terminating connection" in lost[0] or "server closed the connection" in lost[0]
    assert "Traceback" not in lost[0]
    assert "2 of 3" in lost[0]
    assert _copies_started(d, "public.cut") == 2
    assert _copies_started(d, "public.kept") == 1
    wait_lake_equals_source(d.settings, d.url, ["public.kept", "public.cut"], d.proc, timeout=240)
    assert d.proc.stop() == 0


def _first_start_under_writes(d: Deployment, failpoints: str) -> str:
    """The first start, with `failpoints`, copies `TABLES` while a writer changes them; its
    logs once every table is ready."""
    _schema(d.url)
    with Writer(d.url, TABLES):
        d.proc.start({"STREAMBED_FAILPOINTS": failpoints})
        wait_until(lambda: _all_ready(d, TABLES), 300, "every table copied", d.proc)
    return d.proc.logs()


def test_the_first_start_snapshot_expiring_copies_every_table_under_a_new_one(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    logs = _first_start_under_writes(d, "expire_copy_snapshot:1")
    assert sum(1 for line in logs.splitlines() if EXPIRED in line) == len(TABLES)
    for table in TABLES:
        assert _copies_started(d, table) == 2, table
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    assert d.proc.stop() == 0


def test_a_first_start_snapshot_already_dead_is_replaced_before_the_copy_begins(
    copy_deployment: Deployment,
) -> None:
    """The session holding the new slot's snapshot is terminated before the copy starts:
    the copy notices at once and takes a new snapshot; no table is copied twice."""
    d = copy_deployment
    logs = _first_start_under_writes(d, "kill_start_snapshot")
    assert "failpoint kill_start_snapshot" in logs
    assert "the snapshot of the new slot expired before the copy began" in logs
    assert EXPIRED not in logs  # no task ever tried the dead snapshot
    for table in TABLES:
        assert _copies_started(d, table) == 1, table
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    assert d.proc.stop() == 0


def test_a_snapshot_that_keeps_expiring_is_reported_with_the_command_to_run(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO kept SELECT g, 'v' || g FROM generate_series(1, 500) g")
    # Hit 1: the first start copies `kept`; hits 2-4: every snapshot of `stuck` expires.
    d.proc.start({"STREAMBED_FAILPOINTS": "expire_copy_snapshot:2-4"})
    wait_until(lambda: _all_ready(d, ["public.kept"]), 240, "kept copied", d.proc)
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE stuck (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO stuck SELECT g, 'v' || g FROM generate_series(1, 5000) g")
    wait_until(
        lambda: "`streambed resync public.stuck`" in d.proc.logs(), 300, "the message", d.proc
    )
    failed = [line for line in d.proc.logs().splitlines() if "the table stays pending" in line]
    assert len(failed) == 1 and "expired 3 times" in failed[0], failed
    assert _statuses(d)["public.stuck"] == "pending"
    # The other table keeps streaming; changes to the blocked one wait for its copy.
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("INSERT INTO kept VALUES (1000, 'later')")
        conn.execute("UPDATE stuck SET v = 'changed while blocked' WHERE id <= 10")
        conn.execute("DELETE FROM stuck WHERE id > 4990")
    wait_lake_equals_source(d.settings, d.url, ["public.kept"], d.proc)

    assert "resync of public.stuck requested" in _resync(d, "public.stuck")  # hit 5
    wait_until(lambda: _all_ready(d, ["public.stuck"]), 240, "stuck copied", d.proc)
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("UPDATE stuck SET v = 'after the copy' WHERE id = 1")
    wait_lake_equals_source(d.settings, d.url, ["public.kept", "public.stuck"], d.proc)
    assert _copies_started(d, "public.kept") == 1
    assert d.proc.stop() == 0
