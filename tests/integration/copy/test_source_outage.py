"""The source going down during the first start's copy: the copy waits for it (backoff),
copies every table again under a new snapshot once it answers, and the lake equals the
source, all in the same process (it used to leave the tables pending until a restart)."""

from __future__ import annotations

import psycopg
import pytest

from tests.fixtures.postgres import ThrowawayPostgres
from tests.integration.copy.test_initial_copy import ROWS, Writer, _all_ready
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import wait_lake_equals_source, wait_until

pytestmark = pytest.mark.integration

TABLES = ["public.outage_big", "public.outage_small"]
UNREACHABLE = "copy failed: the source is unreachable"


def create_tables(url: str, sizes: dict[str, int]) -> None:
    """Tables of the given rows (table → rows), keys 1..rows; analyzed."""
    with psycopg.connect(url, autocommit=True) as conn:
        for table, rows in sizes.items():
            conn.execute(
                f"CREATE TABLE {table} (id int PRIMARY KEY, name text, amount numeric(12,2), "
                "at timestamptz, note text)"
            )
            conn.execute(
                f"INSERT INTO {table} SELECT g, 'n' || g, g * 1.5, now(), "
                f"repeat('x', g % 50) FROM generate_series(1, {rows}) g"
            )
        conn.execute("ANALYZE")


def test_the_copy_waits_for_a_source_that_went_down_and_copies_again(
    copy_deployment: Deployment, pg_server: ThrowawayPostgres
) -> None:
    d = copy_deployment
    create_tables(d.url, {TABLES[0]: 10 * ROWS, TABLES[1]: ROWS})
    d.proc.start()
    wait_until(
        lambda: "copy started" in d.proc.logs() and "public.outage_big" in d.proc.logs(),
        240,
        "the copy to start",
        d.proc,
    )
    pg_server.stop_server("immediate")  # a crash of the source in the middle of the copy
    try:
        # While the source is down the copy cannot take a new snapshot: it must wait for
        # it, not give the tables up.
        wait_until(lambda: UNREACHABLE in d.proc.logs(), 120, "the outage reported", d.proc)
        wait_until(
            lambda: "copy waits before trying again" in d.proc.logs(),
            60,
            "the copy to wait",
            d.proc,
        )
        assert not _all_ready(d, TABLES)
    finally:
        pg_server.start()
    with Writer(d.url, TABLES) as writer:
        wait_until(lambda: _all_ready(d, TABLES), 300, "every table copied", d.proc)
    assert writer.transactions > 0
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    logs = d.proc.logs()
    assert "the table stays pending" not in logs
    assert d.proc.running  # it rode out the outage in the same process
    assert d.proc.stop() == 0
