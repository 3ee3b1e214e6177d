from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.postgres import PgDatabase
from tests.integration.pipeline.conftest import Deployment, deployment


@pytest.fixture
def copy_deployment(pg_db: PgDatabase, tmp_path: Path) -> Iterator[Deployment]:
    """A `streambed run` on the local warehouse, flushing every second."""
    d = deployment(pg_db, tmp_path)
    d.env["STREAMBED_FLUSH_INTERVAL"] = "1"
    d.proc.env.update(d.env)
    try:
        yield d
    finally:
        d.proc.kill()
