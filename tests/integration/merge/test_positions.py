"""Finding the positions of removed keys reads key columns by field id, skipping hidden rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streambed.lake.merge.positions import find_positions

pytestmark = pytest.mark.integration


def _field(name: str, type_: pa.DataType, field_id: int) -> pa.Field:
    return pa.field(name, type_, True, {b"PARQUET:field_id": str(field_id).encode()})


def test_positions_of_a_two_column_key_by_field_id(tmp_path: Path) -> None:
    # The file was written when the first key column was called "old_k" (renamed since).
    written = pa.schema([_field("old_k", pa.int32(), 1), _field("t", pa.string(), 2)])
    written = written.append(_field("payload", pa.string(), 3))
    rows = pa.table(
        {
            "old_k": pa.array([1, 1, 2, 2, 3], pa.int32()),
            "t": ["a", "b", "a", "b", "a"],
            "payload": ["x"] * 5,
        },
        schema=written,
    )
    path = tmp_path / "f.parquet"
    pq.write_table(rows, path)
    key_schema = pa.schema([_field("k", pa.int64(), 1), _field("t", pa.string(), 2)])
    keys = pa.table({"k": pa.array([1, 2, 3, 9], pa.int64()), "t": ["b", "a", "b", "a"]})
    uri = f"file://{path}"
    found = find_positions([uri], keys, key_schema, {}, {})
    assert found[uri].to_pylist() == [1, 2]  # (1, b) and (2, a); (3, b) and (9, a) absent
    # A row a pending delete file hides is no longer the key's row.
    hidden = {uri: pa.array([2], pa.int64())}
    assert find_positions([uri], keys, key_schema, hidden, {})[uri].to_pylist() == [1]
