"""Socket directories of local Spark sessions: made per process, stale ones removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streambed.spark.sockets import MAX_DIR_CHARS, PREFIX, make_dir, namespace, sweep


def _ended_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_directory_is_named_for_the_process_and_private(short_tmp: Path) -> None:
    made = make_dir(short_tmp)
    assert made is not None and made.parent == short_tmp
    assert made.name.startswith(f"{PREFIX}{namespace()}-{os.getpid()}-")
    assert made.stat().st_mode & 0o777 == 0o700
    again = make_dir(short_tmp)
    assert again is not None and again != made  # each call (socket_dir makes one)


def test_a_path_too_long_for_sockets_gives_no_directory(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * max(1, MAX_DIR_CHARS - len(str(tmp_path))))
    deep.mkdir()
    assert make_dir(deep) is None
    assert list(deep.iterdir()) == []


def test_only_directories_of_ended_processes_of_this_namespace_are_swept(
    tmp_path: Path,
) -> None:
    ours, ended = namespace(), _ended_pid()
    stale = tmp_path / f"{PREFIX}{ours}-{ended}-abcd1234"
    stale.mkdir()
    (stale / ".0cfa7947.sock").write_bytes(b"")
    kept = [
        tmp_path / f"{PREFIX}{ours}-{os.getpid()}-own00000",  # this process
        tmp_path / f"{PREFIX}{ours}-{os.getppid()}-live0000",  # a running one
        tmp_path / f"{PREFIX}{ours + 1}-{ended}-other000",  # pid of another namespace
        tmp_path / f"spark-{ours}-{ended}-unrelated",  # not streambed's
    ]
    for path in kept:
        path.mkdir()
    file = tmp_path / f"{PREFIX}{ours}-{ended}-file0000"
    file.write_text("not a directory")
    assert sweep(tmp_path) == [stale]
    assert not stale.exists()
    assert all(path.is_dir() for path in kept)
    assert file.is_file()


def test_making_a_directory_sweeps_first(short_tmp: Path) -> None:
    stale = short_tmp / f"{PREFIX}{namespace()}-{_ended_pid()}-abcd1234"
    stale.mkdir()
    made = make_dir(short_tmp)
    assert not stale.exists()
    assert made is not None and made.is_dir()
