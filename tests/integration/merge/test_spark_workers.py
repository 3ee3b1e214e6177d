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
