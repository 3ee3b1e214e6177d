"""psql's describe of tables with keys, foreign keys and declared types, against the
source Postgres."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.integration.clients.conftest import Setup

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("psql") is None, reason="needs psql"),
]


def _psql(port: int, database: str, user: str, password: str, command: str) -> str:
    done = subprocess.run(
        ["psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", user, "-d", database,
         "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PGPASSWORD": password, "PGSSLMODE": "disable"},
        check=False,
    )  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout


@pytest.mark.parametrize("command", [r"\d customers", r"\d orders"])
def test_describe_table(setup: Setup, command: str) -> None:
    expected = _psql(
        setup.source_port, setup.source_database, setup.source_user, setup.source_password,
        command,
    )  # fmt: skip
    actual = _psql(setup.port, setup.source_database, "x", "unused", command)
    # the foreign key to public.outside, which is not replicated, is left out
    replicated = "\n".join(line for line in expected.splitlines() if "outside(id)" not in line)
    assert actual.rstrip("\n") == replicated.rstrip("\n")
    assert "FOREIGN KEY (customer_id) REFERENCES customers(id) ON DELETE CASCADE" in actual
    assert "character varying(20)" in actual or "timestamp with time zone" in actual
