"""Which tables the copy reads in streambed's own process (`job.copies_here`). Pure."""

from __future__ import annotations

import pytest

from streambed.buffer.changes import TableKey
from streambed.copy.catalog import TableInfo
from streambed.copy.job import copies_here
from streambed.pgoutput.messages import Relation, RelationColumn

LIMIT = 8 * 1024 * 1024


def _info(blocks: int, toast_bytes: int = 0) -> TableInfo:
    relation = Relation(1, "public", "t", "d", (RelationColumn(1, "id", 23, -1),))
    return TableInfo(relation, TableKey((0,)), blocks, blocks * 100, toast_bytes=toast_bytes)


@pytest.mark.parametrize(
    ("blocks", "toast_bytes", "limit", "here"),
    [
        (1, 0, LIMIT, True),
        (1024, 0, LIMIT, True),  # 8 MiB of heap: at the limit
        (1025, 0, LIMIT, False),
        (10, LIMIT, LIMIT, False),  # a small heap whose values are stored out of line
        (10, LIMIT - 10 * 8192, LIMIT, True),
        (0, 0, LIMIT, False),  # empty: committed without reading
        (1, 0, 0, False),  # 0: every table on Spark
    ],
)
def test_small_tables_are_copied_here(
    blocks: int, toast_bytes: int, limit: int, here: bool
) -> None:
    assert copies_here(_info(blocks, toast_bytes), limit) is here
