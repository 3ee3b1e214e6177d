from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streambed.server.database import DatabaseSettings, LakeDatabase, ServedWatermark


class NoTables:
    """A lake with nothing replicated yet: the handler tests query DuckDB table functions."""

    def latest(self) -> ServedWatermark | None:
        return None


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakeDatabase]:
    warehouse: Path = tmp_path_factory.mktemp("warehouse")
    db = LakeDatabase(DatabaseSettings(warehouse=str(warehouse)), NoTables())
    yield db
    db.close()
