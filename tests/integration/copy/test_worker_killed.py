"""A Spark Python worker killed during the first start's copy (as the kernel's OOM killer
would kill it): the copy fails, the table stays pending and blocked, and it is copied again
under a new snapshot after a pause, in the same process; the lake equals the source (it used
to stay pending until a restart or a resync)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psycopg
import pytest

from streambed.spark.session import DAEMON_MODULE
from tests.integration.copy.test_initial_copy import ROWS, Writer, _all_ready
from tests.integration.copy.test_source_outage import create_tables
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import (
    copy_task_reading,
    wait_lake_equals_source,
    wait_until,
)

pytestmark = pytest.mark.integration

TABLES = ["public.crashy_big", "public.crashy_small"]
FAILED = "copy failed in Spark or storage; the table stays pending and is copied again"


def _reading(url: str, table: str) -> bool:
    """A copy task's connection is reading `table`."""
    with psycopg.connect(url, autocommit=True) as conn:
        return copy_task_reading(conn, table) is not None


def _processes() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, command line) of every process."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        found[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmdline)
    return found


def _python_workers(root: int) -> list[int]:
    """Spark's Python workers under process `root`: the children Spark's daemon forks."""
    processes = _processes()

    def under(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = processes.get(pid, (0, ""))[0]
        return False

    def daemon(pid: int) -> bool:
        return DAEMON_MODULE in processes.get(pid, (0, ""))[1]

    return [
        pid
        for pid, (parent, _) in processes.items()
        if daemon(pid) and daemon(parent) and under(pid)
    ]


def test_a_copy_whose_worker_was_killed_is_copied_again_in_the_same_process(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    create_tables(d.url, {TABLES[0]: 20 * ROWS, TABLES[1]: ROWS})
    d.proc.start({"STREAMBED_COPY_LOCAL_BYTES": "0"})  # both copied by Spark's workers
    assert d.proc.proc is not None
    wait_until(lambda: _reading(d.url, "crashy_big"), 240, "a copy task reading", d.proc)
    workers = _python_workers(d.proc.proc.pid)
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: FAILED in d.proc.logs(), 120, "the copy's failure", d.proc)
    with Writer(d.url, TABLES, first_id=ROWS * 100) as writer:
        wait_until(lambda: _all_ready(d, TABLES), 300, "every table copied", d.proc)
    assert writer.transactions > 0
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc, timeout=300)
    logs = d.proc.logs()
    assert "copying again a table whose copy failed" in logs
    assert "retried at the next start" not in logs
    assert "resync requested" not in logs  # nobody asked: the copy came back by itself
    assert d.proc.running  # healed without a restart
    assert d.proc.stop() == 0
