"""Fixtures of the lake tests: `settings` for a local warehouse and for SeaweedFS, and a
DuckDB connection with the Iceberg extensions (`duck`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from streambed.core.config import Settings
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


@pytest.fixture(scope="module")
def duck() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    for name in ("avro", "httpfs", "iceberg"):
        spec = importlib.util.find_spec(f"duckdb_extension_{name}")
        assert spec is not None and spec.origin is not None
        path = Path(spec.origin).parent / "extensions" / "v1.5.5" / f"{name}.duckdb_extension"
        con.execute(f"LOAD '{path}'")
    yield con
    con.close()
