"""A flush that appends writes its files and commits them from the footers its writer
returned: nothing is read back from storage (on S3 a HEAD and a GET per file)."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file

from streambed.buffer.changes import TableDelta, TableKey
from streambed.core.config import Settings
from streambed.lake import commit as lake_commit
from streambed.lake import types as t
from streambed.lake.catalog import open_catalog
from streambed.lake.files import data_files
from streambed.lake.sink import IcebergSink
from streambed.pgoutput.messages import Relation, RelationColumn

pytestmark = pytest.mark.integration

RELATION = Relation(
    relation_id=16400,
    namespace="public",
    name="events",
    replica_identity="d",
    columns=(RelationColumn(1, "id", t.INT8, -1), RelationColumn(0, "note", t.TEXT, -1)),
)
KEY = TableKey(columns=(0,))


def _delta(ids: range, lsn: int, *, final: bool = True) -> TableDelta:
    rows = tuple((str(i).encode(), f"note {i}".encode()) for i in ids)
    return TableDelta(RELATION, KEY, lsn, False, (), rows, final=final)


def _no_merger() -> Any:
    raise AssertionError("an append needs no merge")


@pytest.fixture
def catalog(settings: Settings) -> Catalog:
    return open_catalog(settings)


def test_appends_and_staged_parts_commit_without_reading_their_files(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[str] = []
    real = parquet_file_to_data_file

    def counted(io: Any, metadata: Any, path: str) -> Any:
        read.append(path)
        return real(io, metadata, path)

    monkeypatch.setattr(lake_commit, "parquet_file_to_data_file", counted)
    sink = IcebergSink(catalog, _no_merger)
    sink.apply(_delta(range(1, 101), 100))
    sink.stage(_delta(range(101, 201), 200, final=False))  # a large transaction's parts
    sink.stage(_delta(range(201, 301), 200, final=False))
    sink.apply(_delta(range(301, 311), 200))
    table = catalog.load_table(("public", "events"))
    files = data_files(table)
    assert sum(f.record_count for f in files) == 310
    assert len(files) == 4
    assert read == []
    # Without returned footers (a merge's files), the commit reads each file back.
    assert lake_commit.data_file(table.io, table.metadata, files[0].path).record_count > 0
    assert read == [files[0].path]
