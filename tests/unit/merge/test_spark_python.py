"""`streambed-spark-python`: Spark's workers import the installed pyspark, not its archive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.spark.python import NAME, worker_path
from streambed.spark.session import worker_python

LIB = "/venv/site-packages/pyspark/python/lib"
ARCHIVES = [
    f"{LIB}/pyspark.zip",
    f"{LIB}/py4j-0.10.9.9-src.zip",
    "/venv/site-packages/pyspark/jars/spark-core_2.13-4.3.0.jar",
]


def test_spark_archives_are_dropped_and_the_rest_kept_in_order() -> None:
    path = os.pathsep.join([ARCHIVES[0], "/app/lib", ARCHIVES[1], ARCHIVES[2], "/app/deps.zip"])
    assert worker_path(path) == os.pathsep.join(["/app/lib", "/app/deps.zip"])
    assert worker_path(os.pathsep.join(ARCHIVES)) == ""
    assert worker_path("") == ""


@given(
    st.lists(
        st.one_of(
            st.sampled_from(ARCHIVES),
            st.from_regex(r"/[a-z]{1,8}(/[a-z0-9_.-]{1,8}){0,3}", fullmatch=True),
        ),
        max_size=8,
    )
)
def test_only_spark_archives_are_dropped(entries: list[str]) -> None:
    kept = worker_path(os.pathsep.join(entries)).split(os.pathsep)
    expected = [
        e
        for e in entries
        if e not in ARCHIVES
        and not e.endswith(".jar")
        and not e.endswith("/pyspark.zip")
        and not (os.path.basename(e).startswith("py4j-") and e.endswith("-src.zip"))
    ]
    assert [k for k in kept if k] == expected


def test_the_installed_command_runs_this_python_without_the_archives() -> None:
    command = worker_python("local[2]")
    assert Path(command).name == NAME, "streambed-spark-python is installed beside the venv"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*ARCHIVES, "/app/lib"])}
    out = subprocess.run(
        [command, "-c", "import os, sys; print(os.environ['PYTHONPATH']); print(sys.executable)"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert out[0] == "/app/lib"
    assert Path(out[1]).resolve() == Path(sys.executable).resolve()


def test_other_masters_and_other_sparks_keep_this_python(monkeypatch: pytest.MonkeyPatch) -> None:
    assert worker_python("spark://cluster:7077") == sys.executable
    assert worker_python("sc://connect:15002") == sys.executable
    monkeypatch.setenv("SPARK_HOME", "/opt/another-spark")
    assert worker_python("local[2]") == sys.executable
