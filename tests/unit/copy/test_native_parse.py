"""The copy lets Arrow's CSV reader parse integer and text columns itself: the result must be
what `streambed.lake.convert` makes of the same fields (the stream's conversion)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.csv as pcsv
from hypothesis import given, settings
from hypothesis import strategies as st

from streambed.copy.client import csv_options
from streambed.copy.task import csv_types, raw_to_table
from streambed.lake.types import INT2, INT4, INT8, TEXT
from streambed.pgoutput.messages import RelationColumn

COLUMNS = [
    RelationColumn(0, "a", INT2, -1),
    RelationColumn(0, "b", INT4, -1),
    RelationColumn(0, "c", INT8, -1),
    RelationColumn(0, "d", TEXT, -1),
]
SCHEMA = pa.schema([("a", pa.int32()), ("b", pa.int32()), ("c", pa.int64()), ("d", pa.string())])


def _field(value: object) -> str:
    """A value as Postgres's COPY csv writes it: NULL unquoted empty, quoted when needed."""
    if value is None:
        return ""
    text = str(value)
    if text == "" or any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


rows = st.lists(
    st.tuples(
        st.none() | st.integers(-(2**15), 2**15 - 1),
        st.none() | st.integers(-(2**31), 2**31 - 1),
        st.none() | st.integers(-(2**63), 2**63 - 1),
        st.none() | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0")),
    ),
    min_size=1,
    max_size=40,
)


def _read(data: bytes, types: list[pa.DataType]) -> pa.RecordBatch:
    read, parse, convert = csv_options(types, 1 << 20)
    table = pcsv.read_csv(
        pa.BufferReader(data), read_options=read, parse_options=parse, convert_options=convert
    )
    return table.combine_chunks().to_batches()[0]


@settings(max_examples=200, deadline=None)
@given(rows)
def test_native_parse_equals_the_stream_conversion(
    values: list[tuple[int | None, int | None, int | None, str | None]],
) -> None:
    data = "".join(",".join(map(_field, row)) + "\n" for row in values).encode()
    types = csv_types(COLUMNS)
    parsed = [t != pa.binary() for t in types]
    native = raw_to_table(_read(data, types), COLUMNS, SCHEMA, "t", parsed)
    converted = raw_to_table(_read(data, [pa.binary()] * 4), COLUMNS, SCHEMA, "t", [False] * 4)
    assert native.equals(converted)
    assert native.to_pylist() == [dict(zip("abcd", row, strict=True)) for row in values]


def test_integer_and_text_columns_are_parsed_by_the_reader() -> None:
    assert csv_types(COLUMNS) == [pa.int32(), pa.int32(), pa.int64(), pa.string()]
