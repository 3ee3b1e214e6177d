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

from streambed.spark.sockets import PREFIX, namespace
from tests.fixtures.spark import PANDAS_WARNING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings(PANDAS_WARNING)]

START = """
import os, sys, time
from streambed.spark import session as spark_session

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


EXIT_WHILE_STARTING = """
import glob, os, threading, time
from streambed.spark import session as spark_session

# As `streambed run` does when it will copy: Spark starts on a thread, and the process ends
# (e.g. a wrong source password) while the JVM is still starting.
threading.Thread(target=spark_session.get_spark, args=("local[1]",), daemon=True).start()
deadline = time.monotonic() + 120
pattern = os.path.join(os.environ["TMPDIR"], "**", "tmp*")
while not glob.glob(pattern, recursive=True):  # pyspark's connection-info directory
    assert time.monotonic() < deadline, "pyspark did not launch its gateway"
    time.sleep(0.01)
print("DIR", glob.glob(pattern, recursive=True)[0], flush=True)
"""

KILLED_WHILE_STARTING = (
    EXIT_WHILE_STARTING
    + """
time.sleep(600)  # killed here, the JVM still starting
"""
)


def _start(tmp: Path, *args: str, script: str = START) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
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


def _group_gone(group: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


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


def test_a_process_that_ends_while_spark_starts_leaves_nothing_in_the_temporary_directory(
    short_tmp: Path,
) -> None:
    """pyspark removes its gateway's connection-info directory in a `finally` that never runs
    when the process ends while the JVM starts on another thread: one `tmpXXXX` directory
    was left per such start, in the system's temporary directory."""
    process = _start(short_tmp, script=EXIT_WHILE_STARTING)
    try:
        assert process.stdout is not None
        announced = process.stdout.readline().split()
        assert announced[:1] == ["DIR"], f"exit {process.wait()}"
        assert Path(announced[1]).is_relative_to(short_tmp)
        assert process.wait(timeout=60) == 0
        assert _group_gone(process.pid), "the JVM outlived the process that started it"
        assert list(short_tmp.iterdir()) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_process_killed_while_spark_starts_leaves_nothing_after_the_next_start(
    short_tmp: Path,
) -> None:
    """SIGKILL runs no exit handler: pyspark's connection-info directory, which the JVM
    still writes into, is in the killed process's own directory, and the next start sweeps
    it (the CI runs' crash tests left one `tmpXXXX` directory each in /tmp before)."""
    killed = _start(short_tmp, script=KILLED_WHILE_STARTING)
    try:
        assert killed.stdout is not None
        announced = killed.stdout.readline().split()
        assert announced[:1] == ["DIR"], f"exit {killed.wait()}"
        info_dir = Path(announced[1])
        assert info_dir.parent.name.startswith(f"{PREFIX}{namespace()}-{killed.pid}-")
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert _group_gone(killed.pid), "the JVM outlived its killed driver"
        clean = _start(short_tmp)
        try:
            _announced(clean)
            assert clean.wait(timeout=120) == 0
        finally:
            if clean.poll() is None:
                os.killpg(clean.pid, signal.SIGKILL)
        assert list(short_tmp.iterdir()) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
