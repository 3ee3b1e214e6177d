"""A local Spark talks to its Python workers over Unix sockets in a directory of the
process's own, kept while Spark stops and starts again in the process, removed at exit, and
swept by the next start when the process was killed.

Each start of Spark in a subprocess is a new Python process (pyspark starts one JVM per
process) whose temporary directory (`TMPDIR`) is the test's own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from streambed.merge.spark_sockets import PREFIX, namespace
from tests.fixtures.spark import PANDAS_WARNING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings(PANDAS_WARNING)]

START = """
import os, sys, time
from streambed.merge import spark_session

def doubled(spark):
    return spark.sparkContext.parallelize([1, 2, 3], 1).map(lambda x: x * 2).collect()

spark = spark_session.get_spark("local[1]")
assert doubled(spark) == [2, 4, 6]
directory = spark.sparkContext.getConf().get("spark.python.unix.domain.socket.dir")
if sys.argv[1:] == ["restart"]:  # the same JVM again: it keeps the first session's path
    spark_session.stop_spark()
    spark = spark_session.get_spark("local[2]")
    assert doubled(spark) == [2, 4, 6]
    assert spark.sparkContext.getConf().get("spark.python.unix.domain.socket.dir") == directory
print("DIR", directory, spark_session._jvm_pid(spark), flush=True)
if sys.argv[1:] == ["wait"]:
    time.sleep(600)
spark_session.stop_spark()
"""


def _start(tmp: Path, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", START, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def _announced(process: subprocess.Popen[str]) -> tuple[Path, int]:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("DIR "):
            _, directory, jvm = line.split()
            return Path(directory), int(jvm)
    raise AssertionError(f"spark did not start (exit {process.wait()})")


def _gone(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(OSError):  # a zombie has exited
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        time.sleep(0.1)
    return False


def test_the_session_uses_a_socket_directory_of_this_process(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.python.unix.domain.socket.enabled") == "true"
    directory = Path(conf.get("spark.python.unix.domain.socket.dir") or "")
    assert directory.name.startswith(f"{PREFIX}{namespace()}-{os.getpid()}-")

    def double(values: Iterable[int]) -> Iterator[int]:
        return (2 * v for v in values)

    assert spark.sparkContext.parallelize([1, 2], 2).mapPartitions(double).collect() == [2, 4]
    # The Python workers' daemon listens there while it runs.
    assert [p for p in directory.iterdir() if p.name.endswith(".sock")]


def test_a_killed_drivers_sockets_are_swept_by_the_next_start_and_a_restart_works(
    short_tmp: Path,
) -> None:
    killed = _start(short_tmp, "wait")
    try:
        directory, jvm = _announced(killed)
        assert directory.parent == short_tmp
        assert directory.name.startswith(f"{PREFIX}{namespace()}-{killed.pid}-")
        killed.send_signal(signal.SIGKILL)  # the driver only: its JVM ends by itself
        killed.wait(timeout=30)
        assert _gone(jvm), "the JVM outlived its killed driver"
        assert directory.is_dir()  # nothing removes it at the kill

        clean = _start(short_tmp, "restart")
        try:
            following, _ = _announced(clean)
            assert clean.wait(timeout=120) == 0
        finally:
            if clean.poll() is None:
                os.killpg(clean.pid, signal.SIGKILL)
        assert following != directory
        assert not directory.exists()  # swept at the start
        assert list(short_tmp.iterdir()) == []  # and its own removed at exit
    finally:
        if killed.poll() is None:
            killed.kill()
        killed.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(killed.pid, signal.SIGKILL)  # the JVM and workers, if any is left
