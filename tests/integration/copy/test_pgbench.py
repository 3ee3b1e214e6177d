"""pgbench's own workload (TPC-B: three updates and an insert a transaction, with
pgbench's `char(n)` fillers, NULL ones among them, and a history table without a primary
key) runs while a first start copies pgbench's tables; afterwards the lake equals the
source, row for row."""

from __future__ import annotations

import subprocess
import time

import psycopg
import pytest

from tests.fixtures.postgres import PgDatabase, find_bin_dir
from tests.integration.copy.test_initial_copy import _all_ready
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import wait_lake_equals_source, wait_until

pytestmark = pytest.mark.integration

TABLES = [
    "public.pgbench_accounts",
    "public.pgbench_branches",
    "public.pgbench_tellers",
    "public.pgbench_history",
]
SCALE = 2  # 200,000 accounts, 26 MiB: copied here in two ranges (or on Spark)
AFTER_SECONDS = 5  # of workload after the copies committed


@pytest.mark.parametrize("local_bytes", [None, "0"], ids=["here", "spark"])
def test_pgbench_running_through_the_first_start(
    copy_deployment: Deployment, pg_db: PgDatabase, local_bytes: str | None
) -> None:
    d = copy_deployment
    if local_bytes is not None:
        d.proc.env["STREAMBED_COPY_LOCAL_BYTES"] = local_bytes
    pgbench = str(find_bin_dir() / "pgbench")
    subprocess.run(
        [pgbench, "-i", "-q", "-s", str(SCALE), pg_db.url],
        check=True,
        capture_output=True,
    )
    workload = subprocess.Popen(
        [pgbench, "-n", "-c", "2", "-j", "2", "-T", "600", pg_db.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        d.proc.start()
        wait_until(lambda: _all_ready(d, TABLES), 180, "pgbench's tables copied", d.proc)
        # Still running when the copies committed: the workload crossed every seam.
        assert workload.poll() is None, workload.communicate()[0]
        time.sleep(AFTER_SECONDS)  # and goes on for a while after them
    finally:
        workload.terminate()
        workload.communicate(timeout=60)
    with psycopg.connect(d.url) as conn:
        row = conn.execute("SELECT count(*) FROM pgbench_history").fetchone()
    assert row is not None and row[0] > 100  # one a transaction: the workload did work
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=240)
    assert "copy failed" not in d.proc.logs()
    assert d.proc.stop() == 0
