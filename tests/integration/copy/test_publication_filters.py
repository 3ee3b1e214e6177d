"""A publication with a column list and a row filter (Postgres 15): the copy takes what the
stream sends, only the listed columns of the rows the filter keeps, so the lake holds the
publication's part of the table, and rows that enter or leave the filter later (which
pgoutput sends as inserts and deletes) arrive or go."""

from __future__ import annotations

import psycopg
import pytest

from streambed.lake.catalog import open_catalog
from tests.integration.copy.test_initial_copy import _all_ready
from tests.integration.pipeline.conftest import Deployment
from tests.integration.pipeline.harness import lake_rows, source_rows, wait_until

pytestmark = pytest.mark.integration

PUBLISHED = "orders WHERE region <> 'internal'"
COLUMNS = "region, id, amount"


def _equal(d: Deployment) -> bool:
    return lake_rows(d.settings, "public.orders", COLUMNS) == source_rows(
        d.url, PUBLISHED, COLUMNS
    ) and lake_rows(d.settings, "public.events") == source_rows(d.url, "public.events")


def test_the_copy_takes_the_publications_columns_and_rows(copy_deployment: Deployment) -> None:
    d = copy_deployment
    with psycopg.connect(d.url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE orders (region text, id int, amount int, secret text, "
            "PRIMARY KEY (region, id))"
        )
        conn.execute(
            "INSERT INTO orders SELECT (ARRAY['eu', 'us', 'internal'])[g % 3 + 1], g, g, "
            "'s' || g FROM generate_series(1, 900) g"
        )
        conn.execute("CREATE TABLE events (id int PRIMARY KEY, kind text)")
        conn.execute("INSERT INTO events SELECT g, 'k' || g FROM generate_series(1, 300) g")
        conn.execute(
            "CREATE PUBLICATION streambed FOR TABLE orders (region, id, amount) "
            "WHERE (region <> 'internal'), events WITH (publish_via_partition_root = true)"
        )
    d.proc.start()
    wait_until(lambda: _all_ready(d, ["public.orders", "public.events"]), 240, "copied", d.proc)
    wait_until(lambda: _equal(d), 120, "the published part in the lake", d.proc)
    lake = open_catalog(d.settings).load_table(("public", "orders"))
    assert [f.name for f in lake.schema().fields] == ["region", "id", "amount"]
    with psycopg.connect(d.url, autocommit=True) as conn:
        # into the filter (sent as an insert), out of it (a delete), within it, outside it
        conn.execute("UPDATE orders SET region = 'eu' WHERE region = 'internal' AND id <= 60")
        conn.execute("UPDATE orders SET region = 'internal' WHERE region = 'us' AND id <= 90")
        conn.execute("UPDATE orders SET amount = -amount, secret = 'x' WHERE id % 4 = 0")
        conn.execute("DELETE FROM orders WHERE id > 850")
        conn.execute("INSERT INTO orders VALUES ('internal', 5000, 1, 'h'), ('eu', 5001, 2, 'y')")
        conn.execute("DELETE FROM events WHERE id <= 10")
    wait_until(lambda: _equal(d), 120, "the changes in the lake", d.proc)
    rows = lake_rows(d.settings, "public.orders", COLUMNS) or []
    assert rows and all(region != "internal" for region, *_ in rows)
    assert ("eu", 5001, 2) in rows
    assert d.proc.stop() == 0
