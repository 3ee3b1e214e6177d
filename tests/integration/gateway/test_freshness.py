"""`streambed run`'s query port shows a commit as soon as it lands in the lake, never shows half
of a source transaction spread over two tables, and `streambed serve` (another process on the
same data dir and catalog) follows it."""

from __future__ import annotations

import sqlite3
import threading
import time

import psycopg
import pytest

from tests.integration.gateway.conftest import Gateway, lake_has
from tests.integration.pipeline.harness import wait_until

pytestmark = pytest.mark.integration


def _state_watermark(gateway: Gateway) -> int | None:
    """The newest watermark streambed recorded (read-only, as another process would)."""
    db = sqlite3.connect(f"file:{gateway.data_dir / 'state.db'}?mode=ro", uri=True, timeout=5)
    try:
        row = db.execute("SELECT max(lsn) FROM watermarks").fetchone()
    finally:
        db.close()
    return None if row is None else row[0]


def test_a_commit_is_queryable_within_a_second_of_landing(gateway: Gateway) -> None:
    delays = []
    with psycopg.connect(gateway.conninfo(), autocommit=True) as lake:
        for event in range(1, 4):
            before = _state_watermark(gateway)
            gateway.execute(f"INSERT INTO public.events VALUES ({event}, 'e{event}')")
            committed = time.monotonic()
            landed = seen = None
            while seen is None and time.monotonic() - committed < 60:
                now = time.monotonic()
                if landed is None and _state_watermark(gateway) != before:
                    landed = now
                row = lake.execute("SELECT count(*) FROM public.events WHERE id = %s", [event])
                if row.fetchone() == (1,):
                    seen = time.monotonic()
                    landed = landed or seen
                time.sleep(0.01)
            assert seen is not None and landed is not None, gateway.run.logs()[-3000:]
            delays.append(seen - landed)
    # the pipeline refreshes the views right after each commit: no polling interval
    assert max(delays) < 1.0, delays


def _ledger_state(conn: psycopg.Connection[tuple[int, ...]]) -> tuple[int, ...]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM ledger.debits), (SELECT count(*) FROM ledger.credits), "
        "(SELECT coalesce(sum(amount), 0) FROM ledger.debits), "
        "(SELECT coalesce(sum(amount), 0) FROM ledger.credits)"
    ).fetchone()
    assert row is not None
    return tuple(int(v) for v in row)


def test_no_reader_sees_half_a_transaction_and_serve_follows(gateway: Gateway) -> None:
    stop = threading.Event()
    problems: list[str] = []
    states: dict[int, set[tuple[int, ...]]] = {gateway.run_port: set(), gateway.serve_port: set()}

    def read(port: int) -> None:
        try:
            with psycopg.connect(gateway.conninfo(port), autocommit=True) as conn:
                while not stop.is_set():
                    debits, credits, debit_sum, credit_sum = state = _ledger_state(conn)
                    states[port].add(state)
                    if (debits, debit_sum) != (credits, credit_sum):
                        problems.append(f"port {port} saw half a transfer: {state}")
        except Exception as e:  # reported below
            problems.append(f"reader on port {port} failed: {e!r}")

    readers = [threading.Thread(target=read, args=(port,)) for port in states]
    for reader in readers:
        reader.start()
    transfers = 0
    deadline = time.monotonic() + 8
    with psycopg.connect(gateway.source_url) as source:
        while time.monotonic() < deadline:
            transfers += 1
            with source.transaction():
                source.execute(
                    "INSERT INTO ledger.debits VALUES (%s, %s, %s, %s)",
                    [transfers, transfers, transfers % 10, transfers * 3],
                )
                time.sleep(0.01)  # the two halves apart in the WAL
                source.execute(
                    "INSERT INTO ledger.credits VALUES (%s, %s, %s, %s)",
                    [transfers, transfers, (transfers + 1) % 10, transfers * 3],
                )
    final = (transfers, transfers, 3 * transfers * (transfers + 1) // 2)
    check = "SELECT count(*) FROM ledger.credits"
    wait_until(lambda: lake_has(gateway.conninfo(), check, transfers), 60, "run", gateway.run)
    wait_until(
        lambda: lake_has(gateway.conninfo(gateway.serve_port), check, transfers),
        30,
        "streambed serve to follow",
        gateway.serve,
    )
    time.sleep(0.5)
    stop.set()
    for reader in readers:
        reader.join(30)
    assert not problems, problems[:5]
    for port, seen in states.items():
        assert len(seen) >= 3, f"port {port} saw too few states to prove anything: {seen}"
        with psycopg.connect(gateway.conninfo(port), autocommit=True) as conn:
            assert _ledger_state(conn) == (*final[:2], final[2], final[2])
