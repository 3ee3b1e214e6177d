"""Spark's Python workers run `streambed-spark-python`: the installed, compiled pyspark."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fixtures.spark import PANDAS_WARNING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings(PANDAS_WARNING)]


def test_task_workers_import_the_installed_pyspark(spark: SparkSession) -> None:
    import pyspark

    def where(_: Iterable[int]) -> Iterator[tuple[str, list[str]]]:
        import os
        import sys

        import pyspark

        names = [os.path.basename(p) for p in sys.path]
        archives = [n for n in names if n == "pyspark.zip" or n.startswith("py4j-") or ".jar" in n]
        yield pyspark.__file__ or "", archives

    found = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(where).collect()
    assert len(found) == 2
    for file, archives in found:
        assert Path(file).resolve() == Path(pyspark.__file__ or "").resolve()
        assert archives == []


def _held_at_start(_: int, rows: Iterable[int]) -> Iterator[tuple[int, int, int]]:
    """A task like a copy's: streambed's copy code imported; what the collector tracks
    when the task starts (before `settle`) and what `settle` froze."""
    import gc
    import os

    import streambed.copy.task  # noqa: F401  (a copy task's imports)
    from streambed.spark.worker_heap import settle

    tracked = len(gc.get_objects())
    settle()
    list(rows)  # a worker that leaves input unread is not reused
    yield os.getpid(), tracked, gc.get_freeze_count()


def test_reused_workers_keep_their_objects_frozen_between_tasks(spark: SparkSession) -> None:
    """pyspark's daemon collects every object of a worker after each task; after `settle`
    that collection visits only what a task made, and nothing piles up frozen."""
    context = spark.sparkContext
    rounds = [
        context.parallelize([0, 1], 2).mapPartitionsWithIndex(_held_at_start).collect()
        for _ in range(4)
    ]
    seen: dict[int, int] = {}
    reused = 0
    for found in rounds:
        for pid, tracked, frozen in found:
            assert frozen > 50_000  # pyspark's, pyarrow's, DuckDB's and streambed's objects
            if pid in seen:  # the daemon collected after this worker's previous task
                reused += 1
                assert tracked < frozen / 20, (tracked, frozen)
                assert abs(frozen - seen[pid]) < 1_000, (seen[pid], frozen)
            seen[pid] = frozen
    assert reused >= 4
