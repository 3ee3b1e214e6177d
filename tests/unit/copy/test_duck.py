"""The DuckDB reader's pure parts: which columns it decodes, its query, char(n) padding."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from streambed.copy.duck import (
    _message,
    batch_rows,
    conninfo,
    few_distinct,
    native,
    pad,
    pad_distinct,
    passfile_text,
    restore,
    select_query,
)
from streambed.core.errors import SchemaError
from streambed.lake.types import (
    BPCHAR,
    DATE,
    INT4,
    JSON,
    JSONB,
    NUMERIC,
    TEXT,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
)
from streambed.pgoutput.messages import RelationColumn

INTERVAL = 1186


def _numeric(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


def test_native_columns_are_those_duckdb_decodes_to_the_streams_value() -> None:
    assert native(RelationColumn(0, "a", INT4, -1))
    assert native(RelationColumn(0, "t", TEXT, -1))
    assert native(RelationColumn(0, "n", NUMERIC, _numeric(10, 2)))
    assert native(RelationColumn(0, "c", BPCHAR, 5 + 4))
    assert not native(RelationColumn(0, "n", NUMERIC, -1))  # DuckDB: double
    assert not native(RelationColumn(0, "b", BPCHAR, -1))  # blanks are data
    assert native(RelationColumn(0, "d", DATE, -1))  # infinity: the same day number
    assert native(RelationColumn(0, "t", TIMESTAMPTZ, -1))  # with a guard column
    assert not native(RelationColumn(0, "i", INTERVAL, -1))
    # text in the lake, and DuckDB's text is Postgres's
    assert native(RelationColumn(0, "u", UUID, -1))
    assert native(RelationColumn(0, "j", JSONB, -1))
    assert native(RelationColumn(0, "j", JSON, -1))


def test_the_query_names_columns_by_position_and_renders_the_others_as_text() -> None:
    columns = [
        RelationColumn(0, "A", INT4, -1),
        RelationColumn(0, "a", INTERVAL, -1),
        RelationColumn(0, "t", TIMESTAMPTZ, -1),
    ]
    query = select_query("s", 'we"ird', columns, "ctid >= '(0,0)'::tid")
    assert query == (
        'SELECT "A" AS "c0", CASE WHEN "a" IS NULL THEN NULL '
        'ELSE pg_catalog.format(\'%s\', "a") END AS "c1", "t" AS "c2", '
        'CASE WHEN "t" >= \'294247-01-10 04:00:54.775807+00\' AND pg_catalog.isfinite("t") '
        'THEN "t"::text END AS "g2" '
        'FROM ONLY "s"."we""ird" WHERE ctid >= \'(0,0)\'::tid'
    )
    partitioned = select_query("s", "t", columns[:1], "true", only=False)
    assert partitioned == 'SELECT "A" AS "c0" FROM "s"."t" WHERE true'


def test_with_output_functions_the_others_are_their_output_text() -> None:
    columns = [RelationColumn(0, "id", INT4, -1), RelationColumn(0, "h", 16385, -1)]
    outputs = [("pg_catalog", "int4out"), ("my ext", 'hstore"out')]
    query = select_query("s", "t", columns, "true", outputs=outputs)
    assert query == (
        'SELECT "id" AS "c0", CASE WHEN "h" IS NULL THEN NULL '
        'ELSE pg_catalog.textin("my ext"."hstore""out"("h")) END AS "c1" '
        'FROM ONLY "s"."t" WHERE true'
    )


def test_a_timestamp_beyond_duckdbs_range_is_refused_as_the_stream_refuses_it() -> None:
    columns = [RelationColumn(0, "id", INT4, -1), RelationColumn(0, "at", TIMESTAMP, -1)]
    fine = pa.record_batch(
        [pa.array([1, 2], pa.int32()), pa.array([0, 1], pa.timestamp("us")), pa.nulls(2)],
        names=["c0", "c1", "g1"],
    )
    assert restore(fine, columns, "public.t").num_columns == 2
    beyond = pa.record_batch(
        [
            pa.array([1, 2], pa.int32()),
            pa.array([0, -(2**63) + 5], pa.timestamp("us")),
            pa.array([None, "294276-12-31 23:59:59.999999"]),
        ],
        names=["c0", "c1", "g1"],
    )
    with pytest.raises(
        SchemaError, match=re.escape("public.t.at: value '294276-12-31 23:59:59.999999'")
    ):
        restore(beyond, columns, "public.t")


def test_batches_hold_fewer_rows_when_rows_are_wide() -> None:
    assert batch_rows(0) == 65536  # unknown
    assert batch_rows(134) == 65536  # pgbench_accounts
    assert batch_rows(8192) == 2048  # 64 MiB of rows counted 4x
    assert batch_rows(10 * 1024 * 1024) == 16  # TOASTed documents: at least 16 rows


def test_the_source_message_is_taken_out_of_duckdbs_wrapping() -> None:
    wrapped = 'IO Error: Unable to query PostgreSQL: ERROR:  relation "public.t" does not exist'
    assert _message(Exception(wrapped)) == 'relation "public.t" does not exist'
    assert _message(Exception("Binder Error: x")) == "Binder Error: x"
    oom = "Out of Memory Error: failed to allocate 8 MiB\n\nPossible solutions:\n* Reduce"
    assert _message(Exception(oom)) == "Out of Memory Error: failed to allocate 8 MiB"


chars = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.none() | chars, max_size=30), st.integers(1, 10), st.integers(0, 3))
def test_pad_equals_arrows_rpad(values: list[str | None], width: int, skip: int) -> None:
    array = pa.array(values, pa.string()).slice(min(skip, len(values)))
    expected = pc.utf8_rpad(array, width=width, padding=" ")
    padded = pad(array, width)
    padded.validate(full=True)
    assert padded.equals(expected)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.none() | st.sampled_from(["", "a", "é ", "bc"]) | chars, max_size=30))
def test_pad_distinct_holds_the_values_pad_makes(values: list[str | None]) -> None:
    array = pa.array(values, pa.string())
    padded = pad_distinct(array, 6)
    padded.validate(full=True)
    assert padded.dictionary_decode().equals(pad(array, 6))
    assert len(padded.dictionary) == len(set(values) - {None})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.just(""), max_size=30), st.sampled_from(["", "x", None]))
def test_pad_distinct_of_blank_values_pads_one_value(
    values: list[str | None], before: str | None
) -> None:
    # A slice whose offsets do not start at 0 when the value before it is "x".
    array = pa.array([before, *values, "y"], pa.string()).slice(1, len(values))
    padded = pad_distinct(array, 6)
    padded.validate(full=True)
    assert padded.dictionary_decode().equals(pad(array, 6))
    if any(v is not None for v in values):
        assert padded.dictionary.to_pylist() == [" " * 6]
        assert padded.null_count == values.count(None)


def test_few_distinct_means_at_most_a_quarter() -> None:
    assert few_distinct(pa.array(["a", "b"] * 4))
    assert not few_distinct(pa.array(["a", "b", "c"] + ["a"] * 8))
    assert not few_distinct(pa.array([], pa.string()))


def test_restore_pads_only_char_n_columns() -> None:
    batch = pa.record_batch(
        [pa.array(["ab", None]), pa.array(["ab", "x"]), pa.array([1, 2], pa.int32())],
        names=["c0", "c1", "c2"],
    )
    columns = [
        RelationColumn(0, "c", BPCHAR, 4 + 4),
        RelationColumn(0, "b", BPCHAR, -1),
        RelationColumn(0, "i", INT4, -1),
    ]
    out = restore(batch, columns)
    assert out.column(0).to_pylist() == ["ab  ", None]
    assert out.column(1).to_pylist() == ["ab", "x"]
    assert out.column(2).to_pylist() == [1, 2]
    out = restore(batch, columns, distinct={0, 1})  # only a char(n) column is padded
    assert out.column(0).dictionary.to_pylist() == ["ab  "]
    assert out.column(1).to_pylist() == ["ab", "x"]


def test_the_password_goes_to_a_password_file_not_the_keywords(tmp_path: Path) -> None:
    passfile = str(tmp_path / "pgpass")
    keywords, password = conninfo(
        "postgresql://u:p%3Aw%5Cd@h:5/db?options=-c%20work_mem%3D1MB", "app", passfile
    )
    assert password == "p:w\\d" and "p:w" not in keywords
    parsed = conninfo_to_dict(keywords)
    assert parsed["passfile"] == passfile and parsed["application_name"] == "app"
    assert str(parsed["options"]).startswith("-c work_mem=1MB -c DateStyle=ISO,MDY")
    assert passfile_text(password) == "*:*:*:*:p\\:w\\\\d\n"
    keywords, password = conninfo("host=h dbname=db", "app", passfile)
    assert password is None and "passfile" not in conninfo_to_dict(keywords)


def test_a_password_in_duckdbs_message_is_hidden() -> None:
    wrapped = "IO Error: Unable to connect to Postgres at \"user=u password='a b' host=h\": refused"
    assert "a b" not in _message(Exception(wrapped))
    assert "password=*** host=h" in _message(Exception("at password=secret host=h"))
