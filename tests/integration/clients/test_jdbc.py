"""pgjdbc (Debian's libpostgresql-jdbc-java): DatabaseMetaData's keys and columns and
ResultSetMetaData, against the source Postgres and the query server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.jdbc import compile_probe, needs_jdbc, run_probe
from tests.integration.clients.conftest import Setup

PROBE = Path(__file__).with_name("TypesProbe.java")

pytestmark = [pytest.mark.integration, needs_jdbc]


def _probe(classes: Path, port: int, database: str, user: str, password: str) -> dict[str, str]:
    url = f"jdbc:postgresql://127.0.0.1:{port}/{database}"
    return run_probe(classes, PROBE.stem, url, user, password)


@pytest.fixture(scope="module")
def answers(
    setup: Setup, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, str], dict[str, str]]:
    classes = compile_probe(PROBE, tmp_path_factory.mktemp("jdbc-types"))
    expected = _probe(
        classes, setup.source_port, setup.source_database, setup.source_user, setup.source_password
    )
    actual = _probe(classes, setup.port, setup.source_database, "x", "unused")
    return expected, actual


@pytest.mark.parametrize("key", ["imported", "exported", "cross"])
def test_foreign_keys(answers: tuple[dict[str, str], dict[str, str]], key: str) -> None:
    expected, actual = answers
    # the foreign key to public.outside, which is not replicated, is left out
    replicated = [k for k in expected[key].split(",") if "public.outside" not in k]
    assert actual[key].split(",") == replicated
    assert "public.customers.id<-public.orders.customer_id:1" in actual[key]
    assert "outside" not in actual[key]


@pytest.mark.parametrize(
    "key", ["columns.customers", "columns.orders", "primary_key.customers", "primary_key.orders"]
)
def test_columns_and_primary_keys(answers: tuple[dict[str, str], dict[str, str]], key: str) -> None:
    expected, actual = answers
    assert actual[key] == expected[key]


@pytest.mark.parametrize("key", ["described.0", "described.1", "values.0", "values.1"])
def test_result_set_metadata_and_values(
    answers: tuple[dict[str, str], dict[str, str]], key: str
) -> None:
    expected, actual = answers
    assert actual[key] == expected[key]
