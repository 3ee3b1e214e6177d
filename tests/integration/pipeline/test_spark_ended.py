"""Spark's JVM ends under a running `streambed run` (the out-of-memory killer picks the
largest process; a service manager signals every process of the service): the process
starts Spark again, retries what failed, and the lake then equals the source. Before, every
later flush failed with "Connection refused" for as long as the process ran, and the stop
ended with an internal error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from streambed.spark.sockets import PREFIX
from tests.integration.merge.test_spark_sockets import _gone as gone
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import (
    StreambedProcess,
    copy_task_reading,
    wait_lake_equals_source,
    wait_until,
)
from tests.integration.pipeline.test_replication import SCHEMA, TABLES, execute, start
from tests.integration.pipeline.test_storage_outage import COPY_RETRY, RETRYING, small_and_big

pytestmark = pytest.mark.integration

ENDED = "spark's JVM (pid {pid}) ended with {how}"
AGAIN = "starting spark again"
INTERNAL = "internal error"


def jvm_of(proc: StreambedProcess) -> int | None:
    """The pid of the Java process the streambed process started, if it runs."""
    assert proc.proc is not None
    for child in Path(f"/proc/{proc.proc.pid}/task").glob("*/children"):
        for pid in child.read_text().split():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                    return int(pid)
            except OSError:  # it ended meanwhile
                continue
    return None


def spark_running(proc: StreambedProcess) -> int:
    """Wait until the streambed process has a JVM; its pid."""
    found: list[int] = []

    def running() -> bool:
        pid = jvm_of(proc)
        found[:] = [pid] if pid is not None else []
        return bool(found)

    wait_until(running, 120, "spark's JVM", proc)
    return found[0]


def resync_caught_reading(
    d: Deployment, table: str, timeout: float, then: Callable[[], None]
) -> None:
    """Ask for `table` to be copied again, wait until a copy task reads it (its COPY runs
    in the source), looking every 20 ms, and call `then` at once. The watch begins before
    the request: a warm copy of 1M rows reads for less than half a second and may end
    before the `streambed resync` command has returned (a CI run once missed it so)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(d.url, autocommit=True) as conn:
        request = subprocess.Popen(
            [sys.executable, "-m", "streambed.cli", "resync", f"public.{table}"],
            env={**os.environ, **d.env},
            stdout=subprocess.DEVNULL,
        )
        while copy_task_reading(conn, table) is None:
            if time.monotonic() > deadline:
                request.kill()
                raise AssertionError(f"no copy task read {table} within {timeout:.0f} s")
            time.sleep(0.02)
    then()
    assert request.wait(120) == 0


def kill(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    os.kill(pid, sig)
    assert gone(pid, 30), f"the JVM {pid} did not end on {sig.name}"


def java_temp(jvm: int) -> Path:
    """The `java.io.tmpdir` the JVM runs with."""
    arguments = Path(f"/proc/{jvm}/cmdline").read_bytes().decode().split("\0")
    found = [a.split("=", 1)[1] for a in arguments if a.startswith("-Djava.io.tmpdir=")]
    assert found, arguments
    return Path(found[-1])


def test_streaming_goes_on_after_spark_is_killed(
    local_deployment: Deployment, short_tmp: Path
) -> None:
    d = local_deployment
    d.proc.env["TMPDIR"] = str(short_tmp)
    d.proc.env["STREAMBED_MERGE_LOCAL_BYTES"] = "0"  # every merge on Spark
    d.proc.env["STREAMBED_WRITE_MODE"] = "copy-on-write"  # rewrites, not delete files
    execute(d.url, SCHEMA)
    execute(d.url, "INSERT INTO ints SELECT g, 'v1', g, now() FROM generate_series(1, 2000) g")
    start(d)
    execute(d.url, "UPDATE ints SET name = 'v0' WHERE id <= 10")  # a merge: the sink's merger
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    jvm = spark_running(d.proc)
    # The JVM's temporary files are in the process's own directory, not the system's.
    temp = java_temp(jvm)
    assert temp.parent.parent == short_tmp and temp.parent.name.startswith(PREFIX)
    left = {p.name for p in temp.iterdir()}
    assert any(name.startswith("spark-") for name in left), left  # Spark's local directory

    kill(jvm)
    execute(
        d.url,
        "UPDATE ints SET name = 'v2' WHERE id % 3 = 0",
        "DELETE FROM ints WHERE id <= 50",
        "INSERT INTO pairs SELECT g % 5, 'b' || g, 'v' FROM generate_series(1, 300) g",
        "INSERT INTO shop.words SELECT 'w' || g, g, 'n' FROM generate_series(1, 100) g",
    )
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    logs = d.proc.logs()
    assert ENDED.format(pid=jvm, how=f"signal {int(signal.SIGKILL)}") in logs
    assert "the kernel's out-of-memory killer: `dmesg` says" in logs  # SIGKILL's likely sender
    assert AGAIN in logs
    assert RETRYING in logs  # the merge the kill broke failed once, on the dead JVM
    again = spark_running(d.proc)
    assert again != jvm
    assert java_temp(again) == temp
    assert not left & {p.name for p in temp.iterdir()}  # what the killed JVM left is gone

    execute(d.url, "UPDATE ints SET amount = -amount WHERE id > 1900")  # and it stays up
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    assert d.proc.stop() == 0
    assert INTERNAL not in d.proc.logs()
    assert list(short_tmp.iterdir()) == []  # the process's directory went at its exit


def test_a_copy_is_made_again_after_spark_is_killed(local_deployment: Deployment) -> None:
    d = local_deployment
    d.proc.env["STREAMBED_COPY_LOCAL_BYTES"] = "0"  # `big` is copied by Spark's tasks
    tables = small_and_big(d, 1_000_000)
    jvm = spark_running(d.proc)
    copying = "copy started table=public.big"
    # The JVM is killed while the copy's tasks are reading and writing.
    resync_caught_reading(d, "big", 60, then=lambda: kill(jvm))
    execute(d.url, "UPDATE big SET pad = 'changed' WHERE id % 1000 = 0", "DELETE FROM small")
    wait_until(lambda: d.proc.logs().count(copying) == 3, 180, "a third copy", d.proc)
    wait_lake_equals_source(d.settings, d.url, tables, d.proc, timeout=300)
    logs = d.proc.logs()
    assert ENDED.format(pid=jvm, how=f"signal {int(signal.SIGKILL)}") in logs
    assert AGAIN in logs
    assert COPY_RETRY in logs
    assert d.proc.stop() == 0


def test_sigterm_to_every_process_of_the_service_stops_cleanly(
    local_deployment: Deployment,
) -> None:
    """systemd's default stop (KillMode=control-group) sends SIGTERM to the JVM too."""
    d = local_deployment
    d.proc.env["STREAMBED_MERGE_LOCAL_BYTES"] = "0"  # the merge below runs on Spark
    d.proc.env["STREAMBED_WRITE_MODE"] = "copy-on-write"  # rewrites, not delete files
    execute(d.url, SCHEMA)
    start(d)
    execute(d.url, "INSERT INTO ints SELECT g, 'v1', g, now() FROM generate_series(1, 100) g")
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    execute(d.url, "UPDATE ints SET name = 'v2' WHERE id <= 10")  # a merge on Spark
    wait_lake_equals_source(d.settings, d.url, TABLES, d.proc)
    jvm = spark_running(d.proc)
    assert d.proc.proc is not None
    kill(jvm, signal.SIGTERM)  # Spark's shutdown hooks run; it ends first here
    d.proc.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(120) == 0
    logs = d.proc.logs()
    assert INTERNAL not in logs
    # Java ends on SIGTERM with 128 + 15, after its shutdown hooks.
    assert ENDED.format(pid=jvm, how=f"exit code {128 + signal.SIGTERM}") in logs
    assert AGAIN not in logs
    assert "FutureWarning" not in logs  # pyspark's about pandas 3, which streambed never uses
