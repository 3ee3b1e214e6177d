"""The class archive's bookkeeping: keys, what a start passes the JVM, tidying, the builder's
protocol. The real JVM's side is in tests/integration/merge/test_class_archive.py."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.core.config import Settings
from streambed.core.errors import ConfigError
from streambed.spark import class_archive
from streambed.spark.class_archive import (
    ClassArchive,
    archive_key,
    command_classpath,
    complete_lines,
)

KEY = "0123456789abcdef"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _complete(archive: ClassArchive, size: int = 64) -> None:
    archive.archive.write_bytes(b"x" * size)
    archive.manifest.write_text(json.dumps({"key": archive.key, "size": size}))


@given(st.binary(max_size=200))
def test_complete_lines_is_the_data_up_to_its_last_newline(data: bytes) -> None:
    kept = complete_lines(data)
    assert data.startswith(kept)
    assert kept == b"" or kept.endswith(b"\n")
    assert b"\n" not in data[len(kept) :]


def test_the_classpath_is_read_from_a_jvm_command_line() -> None:
    args = ["/usr/bin/java", "-cp", "/s/conf:/s/jars/*", "-Xmx2g", "Main", "-cp", "x"]
    assert command_classpath(args) == ("/usr/bin/java", "/s/conf:/s/jars/*")
    assert command_classpath(["java", "-classpath", "a.jar", "Main"]) == ("java", "a.jar")
    assert command_classpath(["java", "-Xmx1g", "Main"]) is None
    assert command_classpath(["java", "Main", "-cp"]) is None


def test_the_key_follows_the_jars_and_the_java(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"a")
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_bytes(b"java")
    key = archive_key(java, jars)
    assert key == archive_key(java, jars)
    (jars / "b.jar").write_bytes(b"b")
    added = archive_key(java, jars)
    assert added != key
    (jars / "b.jar").write_bytes(b"bigger")
    assert archive_key(java, jars) not in (key, added)
    other = tmp_path / "jdk2" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"java")
    assert archive_key(other, jars) != archive_key(java, jars)


def test_a_first_start_records_its_classes(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path / "spark", KEY)
    options = archive.java_options().split()
    assert f"-XX:DumpLoadedClassList={archive.recording}" in options
    assert archive.recording == archive.directory / f"spark-{KEY}.classlist.{os.getpid()}"
    assert f"-XX:ErrorFile={archive.directory}/hs_err_pid%p.log" in options
    assert not archive.in_use


def test_a_complete_archive_is_used(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path, KEY)
    _complete(archive)
    options = archive.java_options().split()
    assert f"-XX:SharedArchiveFile={archive.archive}" in options
    assert "-Xshare:auto" in options  # an unusable archive is skipped, not fatal
    assert archive.in_use and archive.recording is None


def test_an_archive_whose_manifest_disagrees_is_deleted_and_classes_recorded(
    tmp_path: Path,
) -> None:
    archive = ClassArchive(tmp_path, KEY)
    _complete(archive)
    with archive.archive.open("ab") as f:  # not the size the builder wrote down
        f.write(b"more")
    options = archive.java_options()
    assert "SharedArchiveFile" not in options and "DumpLoadedClassList" in options
    assert not archive.archive.exists() and not archive.manifest.exists()

    archive.archive.write_bytes(b"no manifest")
    assert "SharedArchiveFile" not in ClassArchive(tmp_path, KEY).java_options()
    assert not archive.archive.exists()


def test_after_a_failure_nothing_is_recorded_or_used(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path, KEY)
    _complete(archive)
    archive.discard("the JVM did not start with the archive: boom")
    assert not archive.archive.exists() and not archive.manifest.exists()
    assert "boom" in archive.failed.read_text()
    options = archive.java_options()
    assert "SharedArchiveFile" not in options and "DumpLoadedClassList" not in options
    assert archive.build_later(os.getpid()) is None


def test_tidy_keeps_this_key_and_live_processes_files_only(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path, KEY)
    _complete(archive)
    dead = _dead_pid()
    keep = [
        archive.archive,
        archive.manifest,
        tmp_path / f"spark-{KEY}.classlist.{os.getpid()}",
        archive.class_list,
        tmp_path / "build.log",
    ]
    gone = [
        tmp_path / "spark-fedcba9876543210.jsa",
        tmp_path / "spark-fedcba9876543210.json",
        tmp_path / f"spark-{KEY}.classlist.{dead}",
        tmp_path / f"spark-{KEY}.jsa.tmp-{dead}",
        tmp_path / f"spark-{KEY}.json.tmp-{dead}",
        archive.lock,  # its builder is gone
    ]
    for path in keep[2:] + gone[:-1]:
        path.write_bytes(b"x")
    archive.lock.write_text(str(dead))
    archive.tidy()
    assert [p.name for p in keep if not p.exists()] == []
    assert [p.name for p in gone if p.exists()] == []


def test_nothing_is_tidied_while_a_builder_runs(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path, KEY)
    other = tmp_path / "spark-fedcba9876543210.jsa.tmp-1"
    other.write_bytes(b"x")
    (tmp_path / "spark-fedcba9876543210.lock").write_text(str(os.getpid()))
    assert archive.builder() == os.getpid()
    archive.tidy()
    assert other.exists()


def _fake_java(tmp_path: Path, body: str) -> str:
    java = tmp_path / "java"
    java.write_text(f"#!/bin/sh\n{body}\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return str(java)


def _archive_arg() -> str:
    return 'for a in "$@"; do case "$a" in -XX:SharedArchiveFile=*) f="${a#*=}";; esac; done'


def test_a_build_puts_the_archive_in_place_only_when_java_succeeds(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path / "spark", KEY)
    archive.directory.mkdir()
    archive.class_list.write_text("java/lang/Object id: 0\n")
    java = _fake_java(tmp_path, f'{_archive_arg()}\nprintf archived > "$f"')
    assert archive.build(java, "/jars/*")
    assert archive.archive.read_bytes() == b"archived"
    assert archive.usable()
    assert not archive.class_list.exists() and not archive.lock.exists()
    assert sorted(p.name for p in archive.directory.iterdir()) == sorted(
        [archive.archive.name, archive.manifest.name]
    )


@pytest.mark.parametrize(
    "body",
    [f'{_archive_arg()}\nprintf half > "$f"; exit 3', "exit 0"],
    ids=["java fails", "java writes nothing"],
)
def test_a_failed_build_leaves_no_archive_and_a_reason(tmp_path: Path, body: str) -> None:
    archive = ClassArchive(tmp_path, KEY)
    archive.class_list.write_text("java/lang/Object id: 0\n")
    assert not archive.build(_fake_java(tmp_path, body), "/jars/*")
    assert not archive.archive.exists() and not archive.manifest.exists()
    assert "build.log" in archive.failed.read_text()
    assert not list(tmp_path.glob("*.tmp-*")) and not archive.lock.exists()


def test_one_builder_at_a_time(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path, KEY)
    archive.lock.write_text(str(os.getpid()))  # a live builder
    java = _fake_java(tmp_path, f'{_archive_arg()}\nprintf archived > "$f"')
    assert not archive.build(java, "/jars/*")
    assert not archive.archive.exists()
    assert archive.lock.read_text() == str(os.getpid())


def test_a_directory_spark_would_split_gets_no_archive(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    assert ClassArchive.open(tmp_path / "with space", jars) is None


def test_the_setting_is_on_or_off() -> None:
    env = {"STREAMBED_SOURCE_URL": "postgresql://x"}
    assert Settings.from_env(env).spark_class_archive == "on"
    assert Settings.from_env({**env, "STREAMBED_SPARK_CLASS_ARCHIVE": "off"}).spark_class_archive
    with pytest.raises(ConfigError, match="STREAMBED_SPARK_CLASS_ARCHIVE='yes' must be on or off"):
        Settings.from_env({**env, "STREAMBED_SPARK_CLASS_ARCHIVE": "yes"})


def test_a_build_ended_by_a_signal_is_tried_again_later(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path, KEY)
    archive.class_list.write_text("java/lang/Object id: 0\n")
    java = _fake_java(tmp_path, f'{_archive_arg()}\nprintf half > "$f"; kill -9 $$')
    assert not archive.build(java, "/jars/*")
    assert not archive.archive.exists() and not archive.failed.exists()
    assert archive.class_list.exists() and not list(tmp_path.glob("*.tmp-*"))


@contextlib.contextmanager
def _recording(directory: Path) -> Iterator[tuple[ClassArchive, int]]:
    """An archive whose start recorded a class, and the pid of a process whose command line
    names a classpath, as a JVM's does."""
    jvm = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-cp", "/jars/*", "Main"]
    )
    try:
        archive = ClassArchive(directory, KEY)
        archive.java_options()
        assert archive.recording is not None
        archive.recording.write_text("java/lang/Object id: 0\n")
        yield archive, jvm.pid
    finally:
        jvm.kill()
        jvm.wait()


def test_no_build_starts_without_the_memory_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _recording(tmp_path) as (archive, jvm):
        monkeypatch.setattr(class_archive, "available_memory", lambda: 512 * 1024 * 1024)
        assert archive.build_later(jvm) is None
        assert not archive.class_list.exists() and archive.builder() is None


def test_available_memory_is_read_from_the_kernel() -> None:
    free = class_archive.available_memory()
    assert free is not None and 0 < free < 1 << 50


def test_an_archive_that_cannot_be_prepared_does_not_stop_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streambed.spark import session as spark_session

    blocker = tmp_path / "file"
    blocker.write_text("x")
    archive = ClassArchive(blocker / "spark", KEY)  # its directory cannot be made
    started: list[str] = []

    def start(master: str, java_options: str) -> str:  # Spark's launch, recorded
        started.append(java_options)
        return "session"

    monkeypatch.setattr(spark_session, "_start", start)
    assert spark_session._build("local[1]", archive) == "session"  # type: ignore[comparison-overlap]
    assert started == [spark_session._CONF["spark.driver.extraJavaOptions"]]


def test_a_builder_that_cannot_be_prepared_is_skipped(tmp_path: Path) -> None:
    with _recording(tmp_path) as (archive, jvm):
        archive.class_list.mkdir()  # the list cannot be written where it goes
        assert archive.build_later(jvm) is None
        assert archive.builder() is None and archive.recording is None
