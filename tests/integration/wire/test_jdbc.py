"""pgjdbc (Debian's libpostgresql-jdbc-java) against the server: a small Java program calling
DatabaseMetaData (what DBeaver, Metabase and Tableau use) and running prepared statements."""

from __future__ import annotations

from pathlib import Path

import pytest

from streambed.server.wire.server import QueryServer
from tests.fixtures.jdbc import compile_probe, needs_jdbc, run_probe
from tests.integration.wire.conftest import ITEM_ROWS, PASSWORD, USER

PROBE = Path(__file__).with_name("JdbcProbe.java")
pytestmark = needs_jdbc


@pytest.fixture(scope="module")
def results(server: QueryServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    classes = compile_probe(PROBE, tmp_path_factory.mktemp("jdbc"))
    url = f"jdbc:postgresql://127.0.0.1:{server.port}/streambed"
    return run_probe(classes, PROBE.stem, url, USER, PASSWORD)


def test_metadata_and_queries(results: dict[str, str]) -> None:
    assert results["product"].startswith("PostgreSQL 15")
    assert "public.items" in results["tables"].split(",")
    columns = results["columns"].split(",")
    assert columns[:3] == ["id:int8", "name:text", "price:numeric"]
    assert "created_at:timestamptz" in columns
    assert results["row"] == "6|item 6|0.06|2024-01-07|2024-01-01T18:00:00Z"
    assert results["count_label"] == "count count=1"
    assert results["fetched"] == f"{ITEM_ROWS} sum={ITEM_ROWS * (ITEM_ROWS + 1) // 2}"
    assert results["error_state"] == "42P01"
    assert results["after_error"] == "1"


def test_primary_keys(results: dict[str, str]) -> None:
    assert "primary_key_error" not in results
    assert results["primary_key"] == "id"


def test_index_info_lists_the_primary_key_index(results: dict[str, str]) -> None:
    # DatabaseMetaData.getIndexInfo (DBeaver's table properties): the unique index that
    # backs the primary key, as on Postgres (items_pkey on id)
    assert "indexes_error" not in results, results["indexes_error"]
    assert results["indexes"] == "items_pkey:id:false:1"


def test_what_bi_tools_call_at_connect(results: dict[str, str]) -> None:
    schemas = results["schemas"].split(",")
    assert "public" in schemas and "pg_catalog" in schemas
    assert schemas == sorted(schemas)
    types = dict(t.rsplit(":", 1) for t in results["types"].split(","))
    # java.sql.Types: BIGINT -5, INTEGER 4, NUMERIC 2, VARCHAR 12, TIMESTAMP 93, BOOLEAN -7/16
    assert types["int8"] == "-5" and types["int4"] == "4" and types["numeric"] == "2"
    assert types["text"] == "12" and types["timestamptz"] == "93"
    assert results["catalogs"] == "streambed"
