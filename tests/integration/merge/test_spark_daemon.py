"""Spark stops idle Python workers after a minute; streambed's daemon lets them end quietly."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from streambed.spark.session import get_spark, stop_spark

    def where(rows):
        list(rows)
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            yield os.getpid(), f.read().replace(b"\\0", b" ").decode()

    spark = get_spark("local[2]")
    context = spark.sparkContext
    first = context.parallelize(range(2), 2).mapPartitions(where).collect()
    pids = {pid for pid, _ in first}
    print("daemon", first[0][1], flush=True)

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.monotonic() + 150  # Spark looks for idle workers every 10 s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(1)
    print("stopped", not any(alive(p) for p in pids), flush=True)
    again = context.parallelize(range(2), 2).mapPartitions(where).collect()
    print("new workers", not pids & {pid for pid, _ in again}, flush=True)
    stop_spark()
    """
)


def test_idle_workers_spark_stops_end_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err
    assert "stopped True" in out, out  # Spark stopped the idle workers...
    assert "Traceback" not in err and "BrokenPipeError" not in err, err  # ...quietly
    assert "new workers True" in out, out  # and starts new ones for the next job
    assert "streambed.spark.daemon" in out.split("daemon", 1)[1].splitlines()[0], out
