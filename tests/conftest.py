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


# The modules that take a minute or more (mostly waiting: a cold Spark, a timeout running
# out), slowest first. `make test` runs two workers (`-n 2 --dist loadfile`), each taking
# the next module as it finishes one; a long module taken last would leave one worker
# running alone at the end. So these go first, then the other integration modules, then the
# many short unit modules, which fill in whichever worker is free.
SLOW_FIRST = (
    "integration/pipeline/test_spark_ended.py",
    "integration/copy/test_stop_during_copy.py",
    "integration/fidelity/test_table_names.py",
    "integration/pipeline/test_storage_outage.py",
    "integration/copy/test_worker_killed.py",
    "integration/pipeline/test_storage_refused.py",
    "integration/merge/test_class_archive.py",
    "integration/merge/test_spark_daemon.py",
    "unit/merge/test_worker_heap.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the modules for the workers (see SLOW_FIRST); a module's tests stay together
    and in their order."""
    tests = Path(__file__).parent

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.path.relative_to(tests).as_posix()
        if path in SLOW_FIRST:
            return 0, SLOW_FIRST.index(path)
        return (1 if path.startswith("integration/") else 2), 0

    items.sort(key=rank)


@pytest.fixture(autouse=True, scope="session")
def _no_class_archive() -> Iterator[None]:
    from streambed.spark import session as spark_session

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
