"""Flushes that rewrite a small table's files are merged in streambed's own process: the
lake equals the source (updates, a key change, unchanged TOAST values, deletes) and no
Spark job, nor Spark's JVM, is ever started."""

from __future__ import annotations

import pytest

from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import wait_lake_equals_source
from tests.integration.pipeline.test_replication import execute, start
from tests.integration.pipeline.test_spark_ended import jvm_of

pytestmark = pytest.mark.integration

HERE = "merge done in process"
ON_SPARK = "merge start rewrite_files="  # SparkMerger's line


def test_small_table_updates_never_start_spark(local_deployment: Deployment) -> None:
    d = local_deployment
    execute(
        d.url,
        "CREATE TABLE small (id int PRIMARY KEY, name text, big text)",
        "ALTER TABLE small ALTER COLUMN big SET STORAGE EXTERNAL",  # out of line, not compressed
        "INSERT INTO small SELECT g, 'n' || g, CASE WHEN g % 10 = 0 THEN repeat('x', 3000) || g "
        "END FROM generate_series(1, 200) g",
    )
    start(d)
    execute(
        d.url,
        "UPDATE small SET name = 'changed' WHERE id <= 30",  # `big` unchanged: not sent
        "UPDATE small SET id = 1010 WHERE id = 10",  # a key change, `big` taken from id 10
        "DELETE FROM small WHERE id > 190",
        "INSERT INTO small VALUES (500, 'new', NULL)",
    )
    wait_lake_equals_source(d.settings, d.url, ["public.small"], d.proc)
    execute(d.url, "UPDATE small SET name = 'again' WHERE id % 7 = 0")
    wait_lake_equals_source(d.settings, d.url, ["public.small"], d.proc)
    logs = d.proc.logs()
    assert logs.count(HERE) >= 2, logs
    assert ON_SPARK not in logs
    assert jvm_of(d.proc) is None  # Spark was never started
    assert d.proc.stop() == 0
