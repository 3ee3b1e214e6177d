from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streambed.core.config import Settings
from tests.fixtures.postgres import PgDatabase
from tests.fixtures.s3 import ThrowawayS3
from tests.integration.pipeline.conftest import Deployment, deployment


@pytest.fixture(params=["local", "s3"])
def settings(request: pytest.FixtureRequest, pg_db: PgDatabase, tmp_path: Path) -> Settings:
    """Settings for the test's database, with the lake on the local warehouse, then on S3."""
    if request.param == "local":
        return Settings(source_url=pg_db.url, data_dir=tmp_path)
    server: ThrowawayS3 = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return Settings(source_url=pg_db.url, data_dir=tmp_path, **server.settings_kwargs(bucket))


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
