"""A copy that cannot run (no SELECT permission) leaves the other tables streaming and is
retried by `streambed resync`; a resync of a healthy table re-copies it online."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import psycopg
import pytest

from streambed.state import StateStore
from tests.fixtures.postgres import PgDatabase
from tests.integration.copy.test_initial_copy import TABLES, Writer, _all_ready, _schema, _statuses
from tests.integration.pipeline.conftest import STREAMING_OPTIONS, Deployment
from tests.integration.pipeline.harness import wait_lake_equals_source, wait_until

pytestmark = pytest.mark.integration


def _resync(d: Deployment, table: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streambed.cli", "resync", table],
        env={**os.environ, **d.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _copies_committed(d: Deployment, table: str) -> int:
    return sum(
        1 for line in d.proc.logs().splitlines() if "copy committed" in line and table in line
    )


def _start_as_a_role(d: Deployment, pg_db: PgDatabase, table: str, *setup: str) -> str:
    """`open_t` and `table`, 500 rows each, the role (returned, `{role}` in `setup`) may
    SELECT `open_t`; then `setup`, and streambed started as the role."""
    role = "copier_" + uuid.uuid4().hex[:8]
    pg_db.server.create_role(role, "pw-copier", replication=True)
    with psycopg.connect(d.url, autocommit=True) as conn:
        for name in ("open_t", table):
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {name} SELECT g, 'v' || g FROM generate_series(1, 500) g")
        conn.execute(f"GRANT SELECT ON open_t TO {role}")
        for statement in setup:
            conn.execute(statement.format(role=role))
        # Creating a FOR ALL TABLES publication needs a superuser: an administrator does it.
        conn.execute(
            "CREATE PUBLICATION streambed FOR ALL TABLES WITH (publish_via_partition_root = true)"
        )
    d.proc.start({"STREAMBED_SOURCE_URL": pg_db.url_as(role, "pw-copier") + STREAMING_OPTIONS})
    return role


@pytest.mark.parametrize(
    ("table", "setup", "messages", "fix"),
    [
        pytest.param(
            "locked_t",
            (),
            ("GRANT SELECT ON public.locked_t",),
            "GRANT SELECT ON locked_t TO {role}",
            id="without SELECT",
        ),
        # Policies filter what the role's queries see, not what the slot sends: a copy of
        # only the rows the role may see would leave the lake short for ever.
        pytest.param(
            "policed_t",
            (
                "GRANT SELECT ON policed_t TO {role}",
                "ALTER TABLE policed_t ENABLE ROW LEVEL SECURITY",
                "CREATE POLICY evens ON policed_t TO {role} USING (id % 2 = 0)",
            ),
            ("ALTER ROLE {role} BYPASSRLS", "row-level security is on for it"),
            "ALTER ROLE {role} BYPASSRLS",
            id="under row-level security",
        ),
    ],
)
def test_a_table_the_role_cannot_copy_is_reported_and_copied_after_the_fix_and_a_resync(
    copy_deployment: Deployment,
    pg_db: PgDatabase,
    table: str,
    setup: tuple[str, ...],
    messages: tuple[str, ...],
    fix: str,
) -> None:
    d = copy_deployment
    qualified = f"public.{table}"
    role = _start_as_a_role(d, pg_db, table, *setup)
    wait_until(lambda: _all_ready(d, ["public.open_t"]), 240, "open_t copied", d.proc)
    message = messages[0].format(role=role)
    wait_until(lambda: message in d.proc.logs(), 120, "the message", d.proc)
    assert all(m.format(role=role) in d.proc.logs() for m in messages)
    assert _statuses(d)[qualified] != "ready"
    assert "pw-copier" not in d.proc.logs()
    # The other table keeps streaming while this one waits.
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("INSERT INTO open_t VALUES (1000, 'later')")
        conn.execute(f"UPDATE {table} SET v = 'changed while blocked' WHERE id <= 10")
        conn.execute(f"DELETE FROM {table} WHERE id > 490")
    wait_lake_equals_source(d.settings, d.url, ["public.open_t"], d.proc)
    assert d.proc.running

    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute(fix.format(role=role))
    assert f"resync of {qualified} requested" in _resync(d, qualified)
    wait_until(lambda: _all_ready(d, [qualified]), 240, f"{table} copied", d.proc)
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute(f"UPDATE {table} SET v = 'after the copy' WHERE id IN (1, 2)")
    wait_lake_equals_source(d.settings, d.url, ["public.open_t", qualified], d.proc)
    assert d.proc.stop() == 0


def test_resync_of_a_ready_table_copies_it_again_while_writes_continue(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _schema(d.url)
    d.proc.start()
    wait_until(lambda: _all_ready(d, TABLES), 240, "every table copied", d.proc)
    assert _copies_committed(d, "public.big_a") == 1
    with Writer(d.url, TABLES) as writer:
        _resync(d, "public.big_a")
        wait_until(
            lambda: _copies_committed(d, "public.big_a") == 2, 240, "the second copy", d.proc
        )
        wait_until(lambda: _all_ready(d, TABLES), 240, "every table ready again", d.proc)
    assert writer.transactions > 10
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    assert d.proc.stop() == 0


def test_resync_requested_during_the_tables_copy_copies_it_again_after_that_copy(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    _schema(d.url)
    with Writer(d.url, TABLES) as writer:
        # Every table on Spark, not only those over 8 MiB: the first start's copy then runs
        # for seconds (Spark starts first), and a resync is requested while the table is
        # registered and not yet ready.
        d.proc.start({"STREAMBED_COPY_LOCAL_BYTES": "0"})
        wait_until(
            lambda: _statuses(d).get("public.big_b") in ("pending", "copying"),
            120,
            "big_b registered",
            d.proc,
        )
        assert "resync of public.big_b requested" in _resync(d, "public.big_b")
        wait_until(
            lambda: "resync requested during the table's copy" in d.proc.logs(),
            60,
            "the request deferred",
            d.proc,
        )
        wait_until(
            lambda: _copies_committed(d, "public.big_b") == 2, 240, "the second copy", d.proc
        )
        wait_until(lambda: _all_ready(d, TABLES), 240, "every table ready", d.proc)
    assert writer.transactions > 10
    assert _copies_committed(d, "public.big_a") == 1
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    assert d.proc.stop() == 0


def test_a_table_that_no_longer_exists_is_forgotten_and_holds_nothing_back(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO kept VALUES (1, 'a')")
    d.proc.start()
    wait_until(lambda: _all_ready(d, ["public.kept"]), 240, "kept copied", d.proc)
    # The command refuses it (the source does not stream it)...
    refused = subprocess.run(
        [sys.executable, "-m", "streambed.cli", "resync", "public.vanished"],
        env={**os.environ, **d.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 2 and "public.vanished (did you mean public.kept?)" in (
        refused.stderr
    )
    # ... but one recorded while the source could not be asked, or for a table dropped
    # since (between a failed copy and its resync), reaches the running process.
    with StateStore(d.settings.state_path) as state:
        state.request_resync("public", "vanished")
    wait_until(
        lambda: "resync ignored: the table is not streamed" in d.proc.logs(),
        120,
        "the request ignored",
        d.proc,
    )
    assert "public.vanished" not in _statuses(d)
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("INSERT INTO kept VALUES (2, 'b')")
    wait_lake_equals_source(d.settings, d.url, ["public.kept"], d.proc)
    assert d.proc.stop() == 0
