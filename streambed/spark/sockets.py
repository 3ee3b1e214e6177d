"""The directory of a local Spark's Unix domain sockets (Python driver, JVM, Python workers),
and of its JVM's temporary files.

Over TCP on 127.0.0.1 every Python task of a local Spark waits for its first input: the
JVM sends a task's command and then its data in two small writes, and Nagle's algorithm
holds the second until the worker's delayed acknowledgement (40 ms on Linux). Over Unix
domain sockets (`spark.python.unix.domain.socket.enabled`, Spark 4.1+) nothing waits
(docs/initial-copy.md).

Spark creates its socket files in `spark.python.unix.domain.socket.dir` and removes them
when it closes them; a driver that is killed leaves them. So each process gets a directory
of its own in the system's temporary directory, `streambed-spark-<pid namespace>-<pid>-…`,
removed when the process exits; Spark's first start in a process, and the exit, also remove
the directories of processes of the same pid namespace that no longer run (what a killed
`streambed run` left). The JVM's temporary files live in the same directory (`jvm_temp_dir`),
for the same reason: a killed JVM leaves Spark's local directories and unpacked native
libraries, about 5 entries a JVM, in the system's temporary directory otherwise. Where the
temporary directory's path is too long for a socket's name, there is no directory, Spark
uses TCP and its JVM the system's temporary directory.

Written by hand: Spark removes neither the sockets of a killed driver nor their directory,
nor a killed JVM's temporary files.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Final

from streambed.spark.class_archive import alive

log = logging.getLogger(__name__)

PREFIX: Final = "streambed-spark-"
JVM_TEMP: Final = "jvm"
MAX_DIR_CHARS: Final = 60
"""A socket's path is at most 107 bytes (`sun_path`); Spark names its files
`.<uuid>.sock` (42 characters) inside the directory."""
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-(\d+)-")

_lock = threading.Lock()
_current: Path | None = None
_registered = False


def namespace() -> int:
    """The inode of this process's pid namespace (0 where it cannot be read): a pid names
    the same process only within one namespace."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return 0
    found = re.search(r"\[(\d+)\]", link)
    return int(found.group(1)) if found else 0


def socket_dir() -> Path | None:
    """This process's socket directory, made on first use in the temporary directory
    (None: that is too long a path for sockets). The same path for the process's life: a
    Spark stopped and started again in the process runs in the same JVM, which keeps the
    first session's setting."""
    global _current, _registered
    with _lock:
        if _current is None:
            _current = make_dir(Path(tempfile.gettempdir()))
            if _current is not None and not _registered:
                atexit.register(remove)
                _registered = True
        elif not _current.is_dir():  # removed from outside: made again, same path
            _current.mkdir(mode=0o700, parents=True, exist_ok=True)
        return _current


def jvm_temp_dir() -> Path | None:
    """The temporary directory (`java.io.tmpdir`) of the JVM a local Spark starts, inside
    this process's directory: Spark's local directories (`spark-*`, `blockmgr-*`, with
    their shuffle and broadcast blocks) and the native libraries it unpacks (`liblz4-java-*`)
    go there, and so go with the directory when the process exits or, after a kill, is
    swept. A JVM that is killed deletes none of them. None without a process directory,
    or when its path holds a blank (Spark splits its Java options at blanks)."""
    base = socket_dir()
    if base is None or any(c.isspace() for c in str(base)):
        return None
    path = base / JVM_TEMP
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def clear_jvm_temp() -> None:
    """Remove what an ended JVM left in `jvm_temp_dir` (call it only when no JVM of this
    process runs: a running one keeps its files there)."""
    with _lock:
        base = _current
    if base is not None:
        shutil.rmtree(base / JVM_TEMP, ignore_errors=True)


def make_dir(root: Path) -> Path | None:
    """A new socket directory of this process under `root`, once the stale ones there are
    removed; None if `root` is too long a path for the sockets inside."""
    sweep(root)
    prefix = f"{PREFIX}{namespace()}-{os.getpid()}-"
    if len(str(root)) + 1 + len(prefix) + 8 > MAX_DIR_CHARS:
        log.debug("%s is too long a path for Unix sockets: spark uses TCP", root)
        return None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def remove() -> None:
    """Remove this process's socket directory (at exit, Spark stopped) and stale ones."""
    global _current
    with _lock:
        if _current is not None:
            shutil.rmtree(_current, ignore_errors=True)
            sweep(_current.parent)
            _current = None


def sweep(root: Path) -> list[Path]:
    """Remove the socket directories under `root` of processes of this pid namespace that
    no longer run; the directories removed."""
    ours = namespace()
    removed: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            found = _NAME.match(entry.name)
            if found is None or int(found.group(1)) != ours:
                continue
            pid = int(found.group(2))
            if pid == os.getpid() or alive(pid) or not entry.is_dir():
                continue
            shutil.rmtree(entry, ignore_errors=True)
            if not entry.exists():
                removed.append(entry)
    if removed:
        log.info("removed %d spark socket directories of ended processes", len(removed))
    return removed
