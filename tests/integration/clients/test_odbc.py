"""psqlODBC (Debian's odbc-postgresql) through unixODBC and pyodbc: SQLTables, SQLColumns,
SQLPrimaryKeys, SQLForeignKeys, SQLStatistics against the source Postgres and the query
server."""

from __future__ import annotations

import json
import os
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


def _probe(
    port: int, database: str, user: str, password: str, env: dict[str, str]
) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(PROBE), "127.0.0.1", str(port), database, user, password],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, f"the ODBC client failed ({done.returncode}): {done.stderr}"
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.fixture(scope="module")
def answers(
    setup: Setup, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], dict[str, Any]]:
    # unixODBC's own configuration: Debian's odbcinst.ini turns the driver's CommLog on,
    # which leaves a file in /tmp for every connection
    config = tmp_path_factory.mktemp("odbc")
    (config / "odbcinst.ini").write_text("[ODBC]\nTrace=No\n")
    env = {**os.environ, "ODBCSYSINI": str(config)}
    expected = _probe(
        setup.source_port, setup.source_database, setup.source_user, setup.source_password, env
    )
    return expected, _probe(setup.port, setup.source_database, "x", "unused", env)


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
