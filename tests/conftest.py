"""Fixtures shared by the whole suite. Each real server lives in its own plugin module."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.s3",
    "tests.fixtures.spark",
]

# No test but tests/integration/merge/test_class_archive.py builds a Spark class archive (a
# minute of CPU in the background after each clean stop): the `streambed run` processes tests
# start inherit this, and in-process sessions are started without one.
os.environ["STREAMBED_SPARK_CLASS_ARCHIVE"] = "off"
# The `streambed run` processes tests start serve no metrics endpoint (several run at once,
# and its default port is one): tests/integration/metrics turns it on for its own.
os.environ.setdefault("STREAMBED_METRICS_LISTEN", "")


@pytest.fixture(autouse=True, scope="session")
def _no_class_archive() -> Iterator[None]:
    from streambed.merge import spark_session

    patch = pytest.MonkeyPatch()
    patch.setattr(spark_session, "_class_archive", lambda *_: None)
    yield
    patch.undo()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory short enough a path for Unix sockets (pytest's may not be)."""
    path = Path(tempfile.mkdtemp(prefix="sb-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
