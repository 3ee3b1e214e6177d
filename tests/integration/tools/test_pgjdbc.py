"""pgjdbc's DatabaseMetaData (getImportedKeys reads pg_settings) against Postgres and the
query server: a small Java program prints what each call returns; the outputs must match."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.jdbc import compile_probe, needs_jdbc, run_probe
from tests.fixtures.postgres import SUPERUSER, ThrowawayPostgres

from .conftest import Pair

PROBE = Path(__file__).with_name("JdbcKeysProbe.java")
pytestmark = [pytest.mark.integration, needs_jdbc]


def test_metadata_matches_postgres(
    pair: Pair, pg_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    compile_probe(PROBE, tmp_path)
    postgres = run_probe(
        tmp_path,
        PROBE.stem,
        f"jdbc:postgresql://{pg_server.host}:{pg_server.port}/{pair.dbname}",
        SUPERUSER,
        pg_server.password,
    )
    served = run_probe(
        tmp_path,
        PROBE.stem,
        f"jdbc:postgresql://127.0.0.1:{pair.port}/{pair.dbname}",
        "tool",
        "unused",
    )
    assert served == postgres
    assert served["primary_keys"] == "order_id:1:order_lines_pkey,line_no:2:order_lines_pkey"
