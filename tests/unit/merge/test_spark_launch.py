"""At exit, a JVM launch still waiting for its connection info is stopped and its directory
removed; a finished launch is left alone; no launch starts after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streambed.spark import launch as spark_launch

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_launch, "_launches", [])
    monkeypatch.setattr(spark_launch, "_ending", False)


def _launch(directory: Path) -> subprocess.Popen[bytes]:
    directory.mkdir()
    env = {spark_launch.CONN_INFO: str(directory / "tmpinfo")}
    return spark_launch._popen(SLEEP, env=env, stdin=subprocess.PIPE)


def test_a_waiting_launch_is_stopped_and_its_directory_removed(tmp_path: Path) -> None:
    waiting = _launch(tmp_path / "waiting")
    finished = _launch(tmp_path / "finished")
    (tmp_path / "finished").rmdir()  # pyspark's `finally` ran: the JVM is the session's
    try:
        assert spark_launch.stop_waiting_launches() == 1
        assert waiting.poll() is not None
        assert not (tmp_path / "waiting").exists()
        assert finished.poll() is None
    finally:
        for process in (waiting, finished):
            process.kill()
            process.wait()


def test_no_launch_starts_once_the_process_ends(tmp_path: Path) -> None:
    assert spark_launch.stop_waiting_launches() == 0
    with pytest.raises(RuntimeError, match="ending"):
        _launch(tmp_path / "late")
