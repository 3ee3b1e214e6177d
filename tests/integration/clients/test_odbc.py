"""psqlODBC (Debian's odbc-postgresql) through unixODBC and pyodbc: SQLTables, SQLColumns,
SQLPrimaryKeys, SQLForeignKeys, SQLStatistics against the source Postgres and the query
server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.clients.conftest import Setup

DRIVER = Path("/usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so")
PROBE = Path(__file__).with_name("odbc_probe.py")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not DRIVER.exists(),
        reason="needs odbc-postgresql and unixodbc (scripts/system-deps.sh installs them)",
    ),
]


def _probe(port: int, database: str, user: str, password: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(PROBE), "127.0.0.1", str(port), database, user, password],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"the ODBC client failed ({done.returncode}): {done.stderr}"
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.fixture(scope="module")
def answers(setup: Setup) -> tuple[dict[str, Any], dict[str, Any]]:
    expected = _probe(
        setup.source_port, setup.source_database, setup.source_user, setup.source_password
    )
    return expected, _probe(setup.port, setup.source_database, "x", "unused")


def _replicated(rows: Any) -> Any:
    """Postgres's answer without the table that is not replicated."""
    if not isinstance(rows, list):
        return rows
    return [r for r in rows if "outside" not in r]


@pytest.mark.parametrize(
    "key",
    [
        "tables",
        "columns.customers",
        "columns.orders",
        "primary_keys.customers",
        "primary_keys.orders",
        "foreign_keys.orders",
        "foreign_keys.customers",
        "statistics.customers",
        "statistics.orders",
        "select",
    ],
)
def test_catalog_functions_answer_as_on_postgres(
    answers: tuple[dict[str, Any], dict[str, Any]], key: str
) -> None:
    expected, actual = answers
    assert actual[key] == _replicated(expected[key])
    assert actual[key], key
