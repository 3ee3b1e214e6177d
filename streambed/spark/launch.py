"""A process that ends while pyspark launches Spark's JVM leaves nothing behind.

`streambed.commands.prestart` starts Spark on a thread, so a start that fails early (a wrong source
password, a read-only key) ends the process while pyspark's `launch_gateway` still waits
for the JVM to write its connection info. The `finally` that removes that file's
`tmpXXXX` directory then never runs: one directory was left in the temporary directory per
such start. Removing the directory at exit is not enough: a JVM that finds it gone cannot
write its connection info, and then never reads its stdin, so it outlives the process.

So pyspark's launcher gets a `Popen` that records each JVM it starts and the directory of
its connection info. At exit, a launch still waiting (its directory still there) has its
JVM stopped (SIGTERM: Spark's shutdown hooks remove Spark's own directories) and its
directory removed. A launch that finished needs nothing: its JVM ends when the process's
end closes its stdin.

A process killed while the JVM starts (SIGKILL: the crash tests kill a first start whose
small tables are copied while Spark starts) runs no exit handler at all, and its JVM still
writes the connection info before it ends. So pyspark's launcher also makes that directory
inside the process's own directory (`spark_sockets.socket_dir`), which the next Spark start
removes with everything else a killed process left (`spark_sockets.sweep`).

Written by hand: pyspark has no setting or hook for either.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Final

from streambed.spark import sockets as spark_sockets

CONN_INFO: Final = "_PYSPARK_DRIVER_CONN_INFO_PATH"
"""The environment variable by which pyspark tells the JVM where to write its connection info."""
STOP_SECONDS: Final = 10.0

_lock = threading.Lock()
_launches: list[tuple[subprocess.Popen[bytes], Path]] = []
_ending = False
_installed = False


def install() -> None:
    """Give pyspark's launcher the recording `Popen`, once per process, before Spark's
    first classic start."""
    global _installed
    with _lock:
        if _installed:
            return
        import pyspark.java_gateway as gateway

        vars(gateway)["Popen"] = _popen
        vars(gateway)["tempfile"] = _LauncherTempfile()
        # Made (and its removal at exit registered) first: exit handlers run last-registered
        # first, so waiting launches are stopped before the directory holding their
        # connection info is removed (a JVM that finds it gone would never end).
        spark_sockets.socket_dir()
        atexit.register(stop_waiting_launches)
        _installed = True


class _LauncherTempfile:
    """`tempfile` as pyspark's launcher sees it: a directory made without a `dir` (its
    connection info's) goes into this process's directory when it has one."""

    def __getattr__(self, name: str) -> Any:
        return getattr(tempfile, name)

    @staticmethod
    def mkdtemp(
        suffix: str | None = None, prefix: str | None = None, dir: str | None = None
    ) -> str:
        if dir is None:
            own = spark_sockets.socket_dir()
            dir = None if own is None else str(own)
        return tempfile.mkdtemp(suffix, prefix, dir)


def _popen(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    info = (kwargs.get("env") or {}).get(CONN_INFO)
    with _lock:
        if _ending:  # a thread still starting Spark while the process ends
            raise RuntimeError("the process is ending: spark is not started")
        process: subprocess.Popen[bytes] = subprocess.Popen(command, **kwargs)
        if info:
            _launches.append((process, Path(info).parent))
    return process


def stop_waiting_launches() -> int:
    """At exit: stop the JVMs whose launch has not finished and remove their connection-info
    directories; how many were stopped. No launch starts after this."""
    global _ending
    with _lock:
        _ending = True
        waiting = [(p, d) for p, d in _launches if d.exists()]
        _launches.clear()
    for process, directory in waiting:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_SECONDS)
        shutil.rmtree(directory, ignore_errors=True)
    return len(waiting)
