"""pgjdbc's DatabaseMetaData (getImportedKeys reads pg_settings) against Postgres and the
query server: a small Java program prints what each call returns; the outputs must match."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.postgres import SUPERUSER, ThrowawayPostgres

from .conftest import Pair

JAR = Path("/usr/share/java/postgresql.jar")
PROBE = Path(__file__).with_name("JdbcKeysProbe.java")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not JAR.exists() or shutil.which("javac") is None,
        reason="needs javac and libpostgresql-jdbc-java (scripts/system-deps.sh installs them)",
    ),
]


def run_probe(classes: Path, url: str, user: str, password: str) -> dict[str, str]:
    done = subprocess.run(
        ["java", "-cp", f"{classes}:{JAR}", "JdbcKeysProbe", url, user, password],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_metadata_matches_postgres(
    pair: Pair, pg_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    subprocess.run(
        ["javac", "-cp", str(JAR), "-d", str(tmp_path), str(PROBE)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    postgres = run_probe(
        tmp_path,
        f"jdbc:postgresql://{pg_server.host}:{pg_server.port}/{pair.dbname}",
        SUPERUSER,
        pg_server.password,
    )
    served = run_probe(
        tmp_path, f"jdbc:postgresql://127.0.0.1:{pair.port}/{pair.dbname}", "tool", "unused"
    )
    assert served == postgres
    assert served["primary_keys"] == "order_id:1:order_lines_pkey,line_no:2:order_lines_pkey"
