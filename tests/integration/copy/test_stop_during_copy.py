"""`streambed run` stopped (SIGTERM) while a first start copies its tables: it stops
copying at once, exits 0, and the next start copies what is left; the lake then equals
the source."""

from __future__ import annotations

import pytest

from tests.integration.copy.test_initial_copy import _all_ready, _statuses
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import wait_lake_equals_source, wait_until
from tests.integration.pipeline.test_replication import execute

pytestmark = pytest.mark.integration

TABLES = [f"public.t{i}" for i in range(16)]
ROWS = 300_000  # about 20 MiB a table: copied here, in two ranges


@pytest.mark.parametrize("local_bytes", [None, "0"], ids=["here", "spark"])
def test_a_stop_during_the_copies_ends_them_and_the_next_start_finishes(
    copy_deployment: Deployment, local_bytes: str | None
) -> None:
    """Copied here (the tables are under `STREAMBED_COPY_LOCAL_BYTES`), or on Spark (0),
    whose copy job the stop cancels."""
    d = copy_deployment
    if local_bytes is not None:
        d.proc.env["STREAMBED_COPY_LOCAL_BYTES"] = local_bytes
    for table in TABLES:
        _filled(d.url, table, ROWS)
    logs = _stopped_on(d, "copy committed", "a first copy")
    stopped = logs[logs.index("stopping") :]
    statuses = _statuses(d)
    ready = [t for t in TABLES if statuses.get(t) == "ready"]
    # The tables queued behind the copies running when the stop came are not copied, and
    # a copy that was starting just then stops before it commits.
    assert len(ready) < len(TABLES) // 2, (statuses, stopped[-3000:])
    for line in stopped.splitlines():
        if "copy started" in line:
            table = line.split("table=", 1)[1].split()[0]
            assert statuses.get(table) != "ready", (table, stopped[-3000:])
    assert "copy failed" not in logs, logs[-3000:]
    first_run = len(logs)
    d.proc.start()
    wait_until(lambda: _all_ready(d, TABLES), 240, "every table copied", d.proc)
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    again = [line for line in d.proc.logs()[first_run:].splitlines() if "copy started" in line]
    for table in ready:  # what was committed is not copied again
        assert not any(f"table={table} " in line for line in again), (table, again)
    assert d.proc.stop() == 0


def test_a_stop_just_before_a_spark_copy_submits_its_job_cancels_that_job(
    copy_deployment: Deployment,
) -> None:
    """The stop lands after the copy's last check for it and before its Spark job is
    submitted (the failpoint holds it there 5 s): the first cancel finds no job, and the
    job, submitted after it, is cancelled by the next; the table is not committed."""
    d = copy_deployment
    d.proc.env["STREAMBED_COPY_LOCAL_BYTES"] = "0"
    d.proc.env["STREAMBED_FAILPOINTS"] = "slow_copy_job"
    table = "public.big"
    _filled(d.url, table, 2_000_000)  # about 130 MiB: its job lasts well over 0.5 s
    logs = _stopped_on(d, "failpoint slow_copy_job", "the held job")
    assert "copy stopped" in logs, logs[-5000:]
    assert "copy committed" not in logs, logs[-5000:]
    assert "did not stop in time" not in logs, logs[-5000:]
    assert _statuses(d).get(table) != "ready"
    del d.proc.env["STREAMBED_FAILPOINTS"]
    d.proc.start()
    wait_until(lambda: _all_ready(d, [table]), 240, "the table copied", d.proc)
    wait_lake_equals_source(d.settings, d.url, [table], d.proc)
    assert d.proc.stop() == 0


def _filled(url: str, table: str, rows: int) -> None:
    execute(
        url,
        f"CREATE TABLE {table} (id int PRIMARY KEY, pad text)",
        f"INSERT INTO {table} SELECT g, md5(g::text) FROM generate_series(1, {rows}) g",
    )


def _stopped_on(d: Deployment, line: str, what: str) -> str:
    """Start streambed, stop it (SIGTERM) once its log holds `line`; its log, after
    checking it exited 0."""
    d.proc.start()
    wait_until(lambda: line in d.proc.logs(), 120, what, d.proc)
    code = d.proc.stop()
    logs = d.proc.logs()
    assert code == 0, logs[-5000:]
    return logs
