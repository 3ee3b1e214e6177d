from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streambed.core.config import Settings
from tests.fixtures.postgres import PgDatabase
from tests.fixtures.s3 import ThrowawayS3
from tests.integration.pipeline.harness import StreambedProcess

# Small enough that the big transactions of these tests are streamed (protocol 2).
STREAMING_OPTIONS = "?options=-c%20logical_decoding_work_mem%3D64kB"


@dataclass
class Deployment:
    url: str  # the source database
    env: dict[str, str]
    settings: Settings
    proc: StreambedProcess


def deployment(
    db: PgDatabase, tmp_path: Path, s3: ThrowawayS3 | None = None, bucket: str = ""
) -> Deployment:
    env = {
        "STREAMBED_SOURCE_URL": db.url + STREAMING_OPTIONS,
        "STREAMBED_DATA_DIR": str(tmp_path / "data"),
        "STREAMBED_QUERY_LISTEN": "",
        "STREAMBED_FLUSH_INTERVAL": "0.5",
        "STREAMBED_HEARTBEAT_INTERVAL": "2",
        "STREAMBED_SPARK_MASTER": "local[2]",
        "STREAMBED_LOG_LEVEL": "info",
    }
    if s3 is not None:
        env.update(s3.env(bucket))
    return Deployment(
        db.url, env, Settings.from_env(env), StreambedProcess(env, tmp_path / "streambed.log")
    )


@pytest.fixture
def local_deployment(pg_db: PgDatabase, tmp_path: Path) -> Iterator[Deployment]:
    d = deployment(pg_db, tmp_path)
    try:
        yield d
    finally:
        d.proc.kill()


@pytest.fixture(params=["local", "s3"])
def any_deployment(
    request: pytest.FixtureRequest, pg_db: PgDatabase, tmp_path: Path
) -> Iterator[Deployment]:
    if request.param == "s3":
        s3: ThrowawayS3 = request.getfixturevalue("s3_server")
        d = deployment(pg_db, tmp_path, s3, s3.new_bucket())
    else:
        d = deployment(pg_db, tmp_path)
    try:
        yield d
    finally:
        d.proc.kill()
