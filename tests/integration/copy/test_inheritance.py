"""A table with inheritance children is copied as itself: the publication sends each
child's changes as the child's, so the parent's lake table holds only the parent's own
rows (`FROM ONLY`), and each child is a lake table of its own. A partitioned table is
still read with its partitions, whose rows it holds (the publication sends them as the
root's)."""

from __future__ import annotations

import psycopg
import pytest

from tests.integration.copy.test_initial_copy import _all_ready
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import lake_rows, source_rows, wait_until

pytestmark = pytest.mark.integration

TABLES = ["public.animals", "public.dogs", "public.measures"]


def _equal(d: Deployment) -> bool:
    # `ONLY`: what the publication sends for the parent
    return lake_rows(d.settings, "public.animals") == source_rows(
        d.url, "ONLY public.animals"
    ) and all(lake_rows(d.settings, t) == source_rows(d.url, t) for t in TABLES[1:])


def test_a_parent_table_is_copied_and_streamed_without_its_childrens_rows(
    copy_deployment: Deployment,
) -> None:
    d = copy_deployment
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE animals (id int PRIMARY KEY, name text)")
        conn.execute("CREATE TABLE dogs (breed text) INHERITS (animals)")
        conn.execute("ALTER TABLE dogs ADD PRIMARY KEY (id)")
        # The same ids in both: the parent's copy must not hold the child's.
        conn.execute("INSERT INTO animals SELECT g, 'a' || g FROM generate_series(1, 800) g")
        conn.execute("INSERT INTO dogs SELECT g, 'd' || g, 'b' || g FROM generate_series(1, 600) g")
        conn.execute(
            "CREATE TABLE measures (id int, day date, v int, PRIMARY KEY (id, day)) "
            "PARTITION BY RANGE (day)"
        )
        for year in (2024, 2025):
            conn.execute(
                f"CREATE TABLE measures_{year} PARTITION OF measures "
                f"FOR VALUES FROM ('{year}-01-01') TO ('{year + 1}-01-01')"
            )
        conn.execute(
            "INSERT INTO measures SELECT g, DATE '2024-01-01' + g, g FROM generate_series(1, 700) g"
        )
    d.proc.start()
    wait_until(lambda: _all_ready(d, TABLES), 240, "the tables copied", d.proc)
    wait_until(lambda: _equal(d), 120, "the lake to equal the source", d.proc)
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute("UPDATE dogs SET name = 'renamed' WHERE id <= 50")
        conn.execute("DELETE FROM dogs WHERE id > 550")
        conn.execute("UPDATE animals SET name = 'parent' WHERE id % 10 = 0")  # both tables' rows
        conn.execute("INSERT INTO dogs VALUES (5000, 'new dog', 'mixed')")
        conn.execute("UPDATE measures SET v = -v WHERE id % 3 = 0")
    wait_until(lambda: _equal(d), 120, "the changes in the lake", d.proc)
    parent = lake_rows(d.settings, "public.animals")
    assert parent is not None and len(parent) == 800
    assert len(lake_rows(d.settings, "public.measures") or []) == 700
    assert d.proc.stop() == 0
