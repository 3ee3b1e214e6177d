"""Bad sources and bad values: a clear message, a meaningful exit code, nothing acknowledged."""

from __future__ import annotations

import socket
from pathlib import Path

import psycopg
import pytest

from streambed.core.lsn import parse_lsn
from tests.fixtures.postgres import PgDatabase
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import (
    slot_exists,
    wait_lake_equals_source,
    wait_until,
)
from tests.integration.pipeline.test_replication import execute

pytestmark = pytest.mark.integration


def test_wrong_password_exits_with_a_clear_message(
    local_deployment: Deployment, short_tmp: Path
) -> None:
    d = local_deployment
    bad_url = d.url.replace("@", "x@", 1) if ":" in d.url.split("@")[0] else d.url
    password = d.url.split("@")[0].rsplit(":", 1)[1]
    # A first start: Spark starts on a thread while the rest loads, so the process ends
    # while its JVM is still starting.
    d.proc.start({"STREAMBED_SOURCE_URL": bad_url, "TMPDIR": str(short_tmp)})
    code = d.proc.wait(timeout=120)
    logs = d.proc.logs()
    assert code == 3, logs
    assert "password" in logs.lower()
    assert password not in logs and password + "x" not in logs
    assert list(short_tmp.iterdir()) == []  # neither Spark's sockets nor pyspark's launch


def test_a_query_address_in_use_exits_before_the_slot_and_spark(
    local_deployment: Deployment,
) -> None:
    d = local_deployment
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        d.proc.start({"STREAMBED_QUERY_LISTEN": f"127.0.0.1:{port}"})
        code = d.proc.wait(timeout=60)
    logs = d.proc.logs()
    assert code == 2, logs
    assert f"STREAMBED_QUERY_LISTEN=127.0.0.1:{port}" in logs
    assert "in use" in logs and "another process listens there" in logs
    assert "Traceback" not in logs and "starting spark" not in logs
    assert not slot_exists(d.url)


def test_role_without_replication_is_told_what_to_run(
    local_deployment: Deployment, pg_db: PgDatabase
) -> None:
    d = local_deployment
    pg_db.server.create_role("plain_reader", "secret-pw")
    d.proc.start({"STREAMBED_SOURCE_URL": pg_db.url_as("plain_reader", "secret-pw")})
    code = d.proc.wait(timeout=120)
    logs = d.proc.logs()
    assert code == 3, logs
    assert "WITH REPLICATION" in logs
    assert "secret-pw" not in logs


def test_unreachable_source_is_retried_until_stopped(local_deployment: Deployment) -> None:
    d = local_deployment
    d.proc.start({"STREAMBED_SOURCE_URL": "postgresql://u:pw@127.0.0.1:1/db"})
    wait_until(lambda: "retrying" in d.proc.logs(), 60, "a retry", d.proc)
    assert d.proc.running
    assert d.proc.stop() == 0


def test_a_value_the_lake_cannot_hold_stops_without_acknowledging(
    local_deployment: Deployment,
) -> None:
    d = local_deployment
    execute(d.url, "CREATE TABLE events (id int PRIMARY KEY, at timestamptz)")
    d.proc.start()
    wait_until(lambda: slot_exists(d.url), 120, "the replication slot", d.proc)
    execute(d.url, "INSERT INTO events VALUES (1, now())")
    wait_lake_equals_source(d.settings, d.url, ["public.events"], d.proc)
    # after 294246 AD: Postgres has it, 64-bit microseconds since 1970 do not
    execute(d.url, "INSERT INTO events VALUES (2, '294270-01-01 00:00:00+00')")
    after_bad_commit = lsn(d.url, "SELECT pg_current_wal_lsn()")
    code = d.proc.wait(timeout=120)
    logs = d.proc.logs()
    assert code == 3, logs
    assert "events" in logs and "at" in logs and "294270-01-01" in logs
    # Idle keepalives may have been acknowledged meanwhile, but never the bad transaction:
    # acknowledging it would put the slot at (or past) the end of its commit record.
    confirmed = lsn(d.url, "SELECT confirmed_flush_lsn FROM pg_replication_slots")
    assert confirmed < after_bad_commit


def lsn(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f"SELECT ({query})::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])
