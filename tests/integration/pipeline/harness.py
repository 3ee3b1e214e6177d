"""Drive `streambed run` as a real process and compare the lake with the source."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import psycopg

from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from streambed.server.extensions import load_extensions

Row = tuple[Any, ...]


class StreambedProcess:
    """`python -m streambed.cli run` with the given environment; logs go to a file."""

    def __init__(self, env: Mapping[str, str], log_path: Path) -> None:
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        # A session of its own: a test that stops the process (SIGSTOP) stops nothing of
        # the test runner's process group or job.
        self.new_session = False

    def start(self, extra_env: Mapping[str, str] | None = None) -> StreambedProcess:
        env = {**self.env, **(extra_env or {})}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streambed.cli", "run"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=self.new_session,
        )
        log.close()
        return self

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM and wait: the process flushes and exits."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, proc: StreambedProcess | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.proc is not None and proc.proc.poll() is not None:
            raise AssertionError(
                f"streambed exited ({proc.proc.returncode}) while waiting for {what}:\n"
                + proc.logs()[-4000:]
            )
        time.sleep(0.25)
    logs = proc.logs()[-4000:] if proc is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")


def copy_task_reading(conn: psycopg.Connection[Any], table: str) -> int | None:
    """The backend pid of a copy task reading `table` (its COPY running in the source:
    a connection named `streambed-copy <run>/<range>`), or None."""
    row = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE "
        "'streambed-copy %%/%%' AND state = 'active' AND query LIKE 'COPY%%' "
        "AND query LIKE %s LIMIT 1",
        (f'%"{table}"%',),
    ).fetchone()
    return None if row is None else int(row[0])


def slot_exists(url: str, slot: str = "streambed") -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return row is not None and row[0] == 1


def slot_confirmed(url: str, slot: str = "streambed") -> str | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    return None if row is None else row[0]


def slot_wal_status(url: str, slot: str = "streambed") -> str | None:
    """The slot's wal_status (reserved, extended, unreserved, lost); None if it is gone."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return None if row is None else str(row[0])


def normalize(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def _sorted(rows: list[Row]) -> list[Row]:
    normal = [tuple(normalize(v) for v in row) for row in rows]
    return sorted(normal, key=repr)


def source_rows(url: str, table: str, columns: str = "*") -> list[Row]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        return _sorted(list(conn.execute(f"SELECT {columns} FROM {table}").fetchall()))


def lake_rows(settings: Settings, table: str, columns: str = "*") -> list[Row] | None:
    """The table's rows read by DuckDB's iceberg_scan; None when the table does not exist."""
    schema, name = table.split(".")
    catalog = open_catalog(settings)
    if not catalog.table_exists((schema, name)):
        return None
    location = catalog.load_table((schema, name)).metadata_location
    conn = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    try:
        load_extensions(conn)
        conn.execute("SET TimeZone = 'UTC'")
        if settings.on_s3:
            endpoint = settings.s3_endpoint.split("://", 1)[-1]
            conn.execute(
                "CREATE SECRET lake (TYPE s3, KEY_ID ?, SECRET ?, ENDPOINT ?, REGION ?, "
                "URL_STYLE 'path', USE_SSL ?)",
                [
                    settings.s3_access_key_id,
                    settings.s3_secret_access_key,
                    endpoint,
                    settings.s3_region,
                    settings.s3_endpoint.startswith("https"),
                ],
            )
        rows = conn.execute(f"SELECT {columns} FROM iceberg_scan(?)", [location]).fetchall()
    finally:
        conn.close()
    return _sorted(rows)


def wait_lake_equals_source(
    settings: Settings,
    url: str,
    tables: list[str],
    proc: StreambedProcess | None,
    timeout: float = 180,
) -> None:
    """Wait until every table reads the same in the lake as in the source."""
    last: dict[str, str] = {}

    def equal() -> bool:
        for table in tables:
            src = source_rows(url, table)
            lake = lake_rows(settings, table)
            if lake != src:
                last[table] = (
                    f"{table}: source {len(src)} rows, lake "
                    f"{'missing' if lake is None else len(lake)} rows"
                )
                return False
        return True

    try:
        wait_until(equal, timeout, "the lake to equal the source", proc)
    except AssertionError as e:
        raise AssertionError(f"{e}\nlast difference: {last}") from None
