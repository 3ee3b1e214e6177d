"""A copy task's Parquet output: row groups gathered, files rolled, sizes reported, discard."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from streambed.lake.output import TaskOutput

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, {b"PARQUET:field_id": b"1"}),
        pa.field("name", pa.string(), True, {b"PARQUET:field_id": b"2"}),
    ]
)


def _rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def _output(tmp_path: Path, **limits: Any) -> TaskOutput:
    base = str(tmp_path / "out")
    return TaskOutput(
        pafs.LocalFileSystem(), base, "file://" + base, "run-00003-ab", SCHEMA, **limits
    )


def test_batches_are_gathered_into_row_groups_and_files_rolled(tmp_path: Path) -> None:
    out = _output(tmp_path, row_group_rows=100, max_rows_per_file=250)
    for start in range(0, 600, 30):
        out.write(_rows(start, 30))
    out.write(_rows(600, 0))
    files = out.close()
    assert [f.rows for f in files] == [250, 250, 100]
    assert [f.uri.rsplit("/", 1)[1] for f in files] == [
        "run-00003-ab-00000.parquet",
        "run-00003-ab-00001.parquet",
        "run-00003-ab-00002.parquet",
    ]
    ids: list[int] = []
    for f in files:
        path = f.uri.removeprefix("file://")
        assert f.bytes == os.path.getsize(path)
        meta = pq.read_metadata(path)
        # Groups of 120 rows (four batches of 30), cut only where a file ends.
        assert all(meta.row_group(i).num_rows <= 120 for i in range(meta.num_row_groups))
        table = pq.read_table(path)
        assert table.schema.field("id").metadata == {b"PARQUET:field_id": b"1"}
        assert not table.schema.field("id").nullable
        ids += table.column("id").to_pylist()
    assert ids == list(range(600))
    assert [pq.read_metadata(files[0].uri[7:]).row_group(i).num_rows for i in range(3)] == [
        120,
        120,
        10,
    ]


def test_byte_limit_closes_a_row_group(tmp_path: Path) -> None:
    out = _output(tmp_path, row_group_rows=1_000_000, row_group_bytes=1)
    out.write(_rows(0, 10))
    out.write(_rows(10, 10))
    (written,) = out.close()
    assert pq.read_metadata(written.uri[7:]).num_row_groups == 2


def test_nothing_written_means_no_file(tmp_path: Path) -> None:
    assert _output(tmp_path).close() == []


def test_discard_deletes_what_was_started(tmp_path: Path) -> None:
    out = _output(tmp_path, row_group_rows=10, max_rows_per_file=15)
    out.write(_rows(0, 20))  # one full file and one open
    assert len(list((tmp_path / "out").iterdir())) == 2
    out.discard()
    assert list((tmp_path / "out").iterdir()) == []


def test_limits_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        _output(tmp_path, row_group_rows=0)


def test_a_unique_column_is_written_without_a_dictionary(tmp_path: Path) -> None:
    out = _output(tmp_path, unique=["id"])
    out.write(pa.table({"id": list(range(1000)), "name": ["same"] * 1000}, schema=SCHEMA))
    (written,) = out.close()
    column = pq.ParquetFile(written.uri.removeprefix("file://")).metadata.row_group(0).column
    assert not any("DICTIONARY" in e for e in column(0).encodings)  # id
    assert any("DICTIONARY" in e for e in column(1).encodings)  # name


def test_a_dictionary_field_is_written_as_its_values(tmp_path: Path) -> None:
    """A copy's char(n) column arrives as dictionary arrays whose dictionaries differ from
    batch to batch; the file holds plain strings (no Arrow schema saying otherwise)."""
    schema = pa.schema(
        [SCHEMA.field("id"), SCHEMA.field("name").with_type(pa.dictionary(pa.int32(), pa.string()))]
    )
    base = str(tmp_path / "out")
    out = TaskOutput(pafs.LocalFileSystem(), base, base, "run", schema, row_group_rows=6)
    names: list[list[str | None]] = [["a", "b", None], ["b", "c", "a"], ["é", None, "c"]]
    for n, values in enumerate(names):
        names_array = pa.array(values).dictionary_encode()
        out.write(pa.table([pa.array([3 * n, 3 * n + 1, 3 * n + 2]), names_array], schema=schema))
    (written,) = out.close()
    table = pq.read_table(written.uri)
    assert table.schema.field("name").type == pa.string()
    assert table.schema.field("name").metadata == {b"PARQUET:field_id": b"2"}
    assert table.column("name").to_pylist() == [v for group in names for v in group]
    assert b"ARROW:schema" not in (pq.read_metadata(written.uri).metadata or {})
    column = pq.ParquetFile(written.uri).metadata.row_group(0).column(1)
    assert any("DICTIONARY" in e for e in column.encodings)
