"""Fixtures of the lake tests: `settings` for a local warehouse and for SeaweedFS."""

from __future__ import annotations

from pathlib import Path

import pytest

from streambed.config import Settings
from tests.fixtures.s3 import ThrowawayS3


@pytest.fixture(params=["local", "s3"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "local":
        return Settings(source_url="postgresql://unused", data_dir=tmp_path)
    server: ThrowawayS3 = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return Settings(
        source_url="postgresql://unused", data_dir=tmp_path, **server.settings_kwargs(bucket)
    )
