"""A local Spark's JVM started from a class-data-sharing archive of the classes it loads.

Most of a local Spark's start is its JVM loading, parsing and verifying about 15,000
classes from Spark's jars. Java's application class-data sharing (AppCDS, Java 10+) maps
them from an archive instead (docs/benchmarks.md, "First start"). The archive depends on
the exact Java runtime and jars, and it is large (about 200 MB), so it is not shipped: each
data directory builds its own, in `data_dir/spark`, without the user doing anything:

1. A start without a usable archive records the classes its JVM loads
   (`-XX:DumpLoadedClassList`; the JVM writes the list line by line) to
   `spark-<key>.classlist.<pid>`.
2. `BUILD_AFTER` seconds into the run (the first copy and merges have loaded their
   classes by then), or at a clean stop (`stop_spark`) if that comes first, the list's
   complete lines are kept as `spark-<key>.classlist`, and a detached builder (this module
   run as a program, at the lowest CPU priority, one at a time) runs `java -Xshare:dump`
   with the running JVM's own classpath into a temporary file. Only when java exits 0 is
   the file synced, its manifest (key and size) written, and the file renamed into place.
3. A later start whose archive and manifest agree passes `-XX:SharedArchiveFile` with
   `-Xshare:auto`: a JVM that finds the archive unusable (another classpath, another JVM
   build) runs without it. A JVM that does not start at all with it (a damaged archive
   can crash it) is started again without it, and the archive is discarded (`discard`).

The key names the Java runtime (its libjvm) and Spark's jars (names, sizes, times): an
upgrade of either starts over with a new key, and files of other keys are deleted. A build
that fails leaves `spark-<key>.failed` (java's output is in `build.log`) and is not tried
again until that file is removed; a java ended by a signal (the kernel's OOM killer picks
the builder first) is tried again by a later run. A build needs about 1 GB of memory and
does not start with less than `BUILD_MEMORY` free. Crash logs of the JVM
(`hs_err_pid*.log`) go to the same directory instead of the working directory.

Written by hand: neither pyspark nor Java 17 manages such an archive (Java 19's
`-XX:+AutoCreateSharedArchive` would, but it writes at JVM exit, and a process killed then
leaves a truncated archive that crashes the next JVM).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

FORMAT = 1
"""Bumped when what goes into an archive changes, so older archives are rebuilt."""
DUMP_TIMEOUT = 3600.0
BUILD_AFTER = 120.0
"""Seconds after Spark's start that a run builds its archive. While streambed runs, not at
its exit: in a container, a process left behind when streambed exits ends with it."""
BUILD_MEMORY = 1536 * 1024 * 1024
"""Memory a build needs free: `java -Xshare:dump` of Spark's classes peaks at about 1 GB
(its class data, not its heap: -Xmx does not lower it)."""
_UNSAFE = re.compile(r"[\s\"'\\]")
"""Characters Spark's splitting of `extraJavaOptions` would mangle in a path."""


def java_binary(environ: dict[str, str] | None = None) -> Path | None:
    """The java Spark's launcher runs: `$JAVA_HOME/bin/java`, else `java` on PATH."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java", path=env.get("PATH"))
    if not found or not os.path.isfile(found):
        return None
    return Path(os.path.realpath(found))


def archive_key(java: Path, jars: Path) -> str:
    """Names the Java runtime and Spark's jars an archive is made of and for."""
    digest = hashlib.sha256(f"{FORMAT}\0{java}".encode())
    libjvm = java.parent.parent / "lib" / "server" / "libjvm.so"
    for path in (libjvm if libjvm.is_file() else java, *sorted(jars.glob("*.jar"))):
        stat = path.stat()
        digest.update(f"\0{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def complete_lines(data: bytes) -> bytes:
    """`data` up to and including its last newline: the part of a class list a running JVM
    has finished writing."""
    return data[: data.rfind(b"\n") + 1]


def command_classpath(args: list[str]) -> tuple[str, str] | None:
    """(java, classpath) of a JVM's command line, None without a classpath."""
    for i, arg in enumerate(args[1:-1], start=1):
        if arg in ("-cp", "-classpath", "--class-path"):
            return args[0], args[i + 1]
    return None


def jvm_command(pid: int) -> tuple[str, str] | None:
    """(java, classpath) of the running JVM `pid` (Linux's /proc)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return command_classpath([a.decode() for a in raw.split(b"\0") if a])


def available_memory() -> int | None:
    """Bytes of memory free for a new process: the kernel's MemAvailable, or less under a
    cgroup (v2) limit. None when neither can be read."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            found.append(int(limit) - used)
    return min(found) if found else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class ClassArchive:
    """The archive of one data directory's Spark, and what this process's start did with it."""

    directory: Path
    key: str
    in_use: bool = False
    recording: Path | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def open(cls, directory: Path, jars: Path) -> ClassArchive | None:
        """None where no archive can be made: not Linux, no java, no jars, or a directory
        whose path Spark would split."""
        directory = directory.resolve()
        java = java_binary()
        if not sys.platform.startswith("linux") or java is None or not jars.is_dir():
            return None
        if _UNSAFE.search(str(directory)):
            log.info("no spark class archive: its directory %s has a space or quote", directory)
            return None
        return cls(directory, archive_key(java, jars))

    def _path(self, suffix: str) -> Path:
        return self.directory / f"spark-{self.key}{suffix}"

    @property
    def archive(self) -> Path:
        return self._path(".jsa")

    @property
    def manifest(self) -> Path:
        return self._path(".json")

    @property
    def class_list(self) -> Path:
        return self._path(".classlist")

    @property
    def failed(self) -> Path:
        return self._path(".failed")

    @property
    def lock(self) -> Path:
        return self._path(".lock")

    def usable(self) -> bool:
        """The archive is complete: its manifest names this key and its size."""
        try:
            manifest = json.loads(self.manifest.read_text())
            size = self.archive.stat().st_size
        except (OSError, ValueError):
            return False
        return (
            isinstance(manifest, dict)
            and manifest.get("key") == self.key
            and manifest.get("size") == size
        )

    def java_options(self) -> str:
        """The JVM options of this start: the archive when it is usable, else recording the
        classes loaded (nothing after a failed build)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tidy()
        options = [f"-XX:ErrorFile={self.directory}/hs_err_pid%p.log"]
        if self.usable():
            self.in_use = True
            log.info("spark starts from its class archive %s", self.archive)
            options += [f"-XX:SharedArchiveFile={self.archive}", "-Xshare:auto"]
        elif not self.failed.exists():
            self.recording = self._path(f".classlist.{os.getpid()}")
            self.recording.unlink(missing_ok=True)
            options.append(f"-XX:DumpLoadedClassList={self.recording}")
        return " ".join(options)

    def discard(self, reason: str) -> None:
        """The JVM did not start with the archive: delete it, and build no other for this
        key until the `failed` file is removed."""
        self.failed.write_text(f"{reason}\n")
        for path in (self.archive, self.manifest):
            path.unlink(missing_ok=True)
        self.in_use = False

    def build_later(self, jvm_pid: int | None) -> subprocess.Popen[bytes] | None:
        """Keep the class list this run has recorded so far and start the builder (detached:
        it may outlive this process). Once per start; None when there is nothing to build."""
        with self._lock:
            recording, self.recording = self.recording, None
        if recording is None or jvm_pid is None:
            return None
        try:
            return self._start_builder(recording, jvm_pid)
        except OSError as error:  # an optimisation: never a reason to stop streambed
            log.warning("spark's class archive is not built: %s", error)
            return None

    def _start_builder(self, recording: Path, jvm_pid: int) -> subprocess.Popen[bytes] | None:
        command = jvm_command(jvm_pid)
        try:
            lines = complete_lines(recording.read_bytes())
        except OSError:
            return None
        recording.unlink(missing_ok=True)
        if command is None or not lines or self.builder() is not None:
            return None
        free = available_memory()
        if free is not None and free < BUILD_MEMORY:
            log.info(
                "spark's class archive is not built this time: %d MB of memory is free, a "
                "build needs about %d MB; a later run tries again",
                free >> 20,
                BUILD_MEMORY >> 20,
            )
            return None
        _write_atomic(self.class_list, lines)
        java, classpath = command
        with (self.directory / "build.log").open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(self.directory), self.key, java, classpath],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log.info(
            "building spark's class archive in the background, once (about a minute of CPU "
            "at the lowest priority); later starts use it",
            extra={"fields": {"archive": str(self.archive)}},
        )
        return proc

    def builder(self) -> int | None:
        """The pid of the builder running in this directory, if one is."""
        for lock in self.directory.glob("spark-*.lock"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(lock.read_text())
                if alive(pid):
                    return pid
        return None

    def tidy(self) -> None:
        """Delete what no process will use: other keys' files, class lists and temporary
        files of processes that are gone, and an archive without its manifest. Nothing
        while a builder runs."""
        if self.builder() is not None:
            return
        for path in self.directory.glob("spark-*"):
            name = path.name
            pid = name.rsplit(".", 1)[-1].removeprefix("tmp-")
            other_key = not name.startswith(f"spark-{self.key}.")
            orphan = pid.isdigit() and not alive(int(pid))
            if other_key or orphan or name.endswith(".lock"):
                path.unlink(missing_ok=True)
        if self.archive.exists() and not self.usable():
            self.archive.unlink()
            self.manifest.unlink(missing_ok=True)

    def _take_lock(self) -> bool:
        for _ in range(2):
            try:
                fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if self.builder() is not None:
                    return False
                self.lock.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return True
        return False

    def build(self, java: str, classpath: str) -> bool:
        """Dump the archive from `class_list` (the builder's work; see the module doc)."""
        if not self._take_lock():
            return False
        temporary = self._path(f".jsa.tmp-{os.getpid()}")
        try:
            command = [
                java,
                "-Xshare:dump",
                f"-XX:SharedClassListFile={self.class_list}",
                f"-XX:SharedArchiveFile={temporary}",
                "-cp",
                classpath,
            ]
            print(f"building {self.archive}: {' '.join(command)}", flush=True)
            try:
                code = subprocess.run(command, stdin=subprocess.DEVNULL, timeout=DUMP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.failed.write_text(f"java -Xshare:dump ran over {DUMP_TIMEOUT:.0f} s\n")
                return False
            if code.returncode < 0:  # killed (out of memory, a stop): not the archive's fault
                print(f"java was ended by signal {-code.returncode}; a later run tries again")
                return False
            if code.returncode != 0 or not temporary.is_file() or not temporary.stat().st_size:
                self.failed.write_text(
                    f"java -Xshare:dump exited {code.returncode}; its output is in build.log\n"
                )
                return False
            with temporary.open("rb") as f:
                os.fsync(f.fileno())
            manifest = {"key": self.key, "size": temporary.stat().st_size, "java": java}
            _write_atomic(self.manifest, json.dumps(manifest).encode())
            os.replace(temporary, self.archive)
            _sync_directory(self.directory)
            self.class_list.unlink(missing_ok=True)
            print(f"built {self.archive} ({manifest['size']} bytes)", flush=True)
            return True
        finally:
            temporary.unlink(missing_ok=True)
            self.lock.unlink(missing_ok=True)


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with temporary.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    """`python -m streambed.spark.class_archive DIRECTORY KEY JAVA CLASSPATH`"""
    directory, key, java, classpath = argv
    with contextlib.suppress(OSError):
        os.nice(19)  # the lowest CPU priority: it uses what a running streambed leaves idle
    with contextlib.suppress(OSError):  # the first the kernel ends when memory runs out
        Path("/proc/self/oom_score_adj").write_text("1000")
    return 0 if ClassArchive(Path(directory), key).build(java, classpath) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
