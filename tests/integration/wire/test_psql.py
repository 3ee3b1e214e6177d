"""psql (the real client binary) against the server: queries, meta-commands, errors."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from streambed.server.wire.server import QueryServer
from tests.integration.wire.conftest import ITEM_ROWS, PASSWORD, USER

PSQL = shutil.which("psql") or "/usr/bin/psql"
pytestmark = pytest.mark.skipif(not os.path.exists(PSQL), reason="psql is not installed")


def psql(
    server: QueryServer, *args: str, password: str = PASSWORD
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin"),
        "PGPASSWORD": password,
        "PGSSLMODE": "disable",
        "PGCONNECT_TIMEOUT": "10",
    }
    return subprocess.run(
        [
            PSQL,
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            str(server.port),
            "-U",
            USER,
            "-d",
            "streambed",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_query_output(server: QueryServer) -> None:
    done = psql(server, "-A", "-t", "-c", "SELECT count(*) AS count FROM public.items")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(ITEM_ROWS)
    done = psql(
        server,
        "-c",
        "SELECT id, name, price, created_at FROM public.items WHERE id <= 2 ORDER BY id",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.rstrip().splitlines()
    assert lines[0].split("|")[0].strip() == "id"
    assert "item 1" in lines[2] and "0.01" in lines[2] and "2024-01-01 13:00:00+00" in lines[2]
    assert lines[-1] == "(2 rows)"


def test_several_statements_and_an_error(server: QueryServer) -> None:
    done = psql(
        server, "-A", "-t", "-c", "SELECT 1; SELECT 2", "-c", "SELECT * FROM nope", "-c", "SELECT 3"
    )
    assert done.stdout.split() == ["1", "2", "3"] or done.stdout.split() == ["2", "3"]
    assert 'relation "nope" does not exist' in done.stderr or "nope" in done.stderr


def test_wrong_password(server: QueryServer) -> None:
    done = psql(server, "-c", "SELECT 1", password="wrong")
    assert done.returncode != 0
    assert 'password authentication failed for user "alice"' in done.stderr


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("\\dt", "items"),
        ("\\d public.items", "created_at"),
        ("\\dn", "public"),
        ("\\l", "streambed"),
    ],
)
def test_meta_commands(server: QueryServer, command: str, expected: str) -> None:
    done = psql(server, "-c", command)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout


def test_fetch_count_reads_through_a_cursor(server: QueryServer) -> None:
    # FETCH_COUNT makes psql BEGIN, DECLARE _psql_cursor, FETCH FORWARD n ..., CLOSE, COMMIT
    done = psql(
        server,
        "-A",
        "-t",
        "-v",
        "FETCH_COUNT=150",
        "-c",
        "SELECT id FROM public.items ORDER BY id",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(i) for i in range(1, ITEM_ROWS + 1)]
