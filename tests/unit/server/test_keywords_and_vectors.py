"""Names DuckDB reads as keywords are quoted; vector subscripts count from 0; Postgres
array text parses back into elements; declared types as clients see them."""

from __future__ import annotations

from typing import Any

import pglast
import pytest

from streambed.server import pgtypes, select_list, vectors
from streambed.server.keywords import QuotingStream, duckdb_only_keywords
from streambed.server.pgarray import NotOneDimensional, parse_array
from streambed.server.rewrite import needs_rewrite


def _parse(sql: str) -> Any:
    """The one statement of `sql`."""
    stmt = pglast.parse_sql(sql)[0].stmt
    assert stmt is not None
    return stmt


def test_the_keyword_set_is_what_duckdb_reserves_and_postgres_does_not() -> None:
    words = duckdb_only_keywords()
    assert {"by", "at", "columns", "qualify", "pivot", "map"} <= words
    assert not {"select", "from", "order", "left", "name"} & words


def test_keywords_are_quoted_only_where_they_are_identifiers() -> None:
    stmt = _parse("select interval '1 day', t.interval, map(1) from t")
    assert (
        QuotingStream()(stmt) == "SELECT CAST('1 day' AS interval), t.\"interval\", map(1) FROM t"
    )


@pytest.mark.parametrize(
    ("sql", "printed"),
    [
        ("select by, t.at from t as at", 'SELECT "by", t."at" FROM t AS "at"'),
        ("select x as qualify from information_schema.columns",
         'SELECT x AS "qualify" FROM information_schema."columns"'),
    ],
)  # fmt: skip
def test_quoted(sql: str, printed: str) -> None:
    stmt = _parse(sql)
    assert needs_rewrite(stmt)  # printed with the names quoted
    assert QuotingStream()(stmt) == printed


def test_plain_names_need_no_quoting() -> None:
    assert not needs_rewrite(_parse("select a, b from t where c = 'by'"))


def test_vector_subscripts_count_from_one_for_duckdb() -> None:
    stmt = _parse("select i.indkey[0], proargtypes[1:2], tags[0] from x")
    targets = [t.val for t in stmt.targetList]
    assert [vectors.is_vector_subscript(t) for t in targets] == [True, True, False]
    shifted = [QuotingStream()(vectors.shift_subscripts(t)) for t in targets[:2]]
    assert shifted == ["(i.indkey)[0 + 1]", "(proargtypes)[1 + 1:2 + 1]"]


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("{}", []),
        ("{1,2,NULL}", ["1", "2", None]),
        ('{"a b","x\\"y",c,"NULL"}', ["a b", 'x"y', "c", "NULL"]),
    ],
)
def test_parse_array(text: str, items: list[str | None]) -> None:
    assert parse_array(text) == items


@pytest.mark.parametrize("text", ["{{1},{2}}", "[0:1]={1,2}", '{"open', "1,2"])
def test_parse_array_refuses_what_it_does_not_read(text: str) -> None:
    with pytest.raises(NotOneDimensional):
        parse_array(text)


@pytest.mark.parametrize(
    ("oid", "typmod", "duckdb", "shown"),
    [
        (1043, 24, "VARCHAR", "character varying(20)"),
        (1042, 8, "VARCHAR", "character(4)"),
        (1007, -1, "VARCHAR", "integer[]"),
        (3802, -1, "VARCHAR", "jsonb"),
        (2950, -1, "VARCHAR", "uuid"),
        (1114, 3, "TIMESTAMP", "timestamp(3) without time zone"),
        (1700, pgtypes.numeric_typmod(8, 2), "DECIMAL(8,2)", "numeric(8,2)"),
    ],
)
def test_declared_types(oid: int, typmod: int, duckdb: str, shown: str) -> None:
    declared = pgtypes.declared_type(oid, typmod, duckdb)
    assert declared is not None and declared.oid == oid and declared.format_type() == shown


def test_a_type_the_lake_holds_typed_otherwise_is_not_overridden() -> None:
    assert pgtypes.declared_type(3802, -1, "INTEGER") is None  # not what DuckDB reads
    assert pgtypes.declared_type(16500, -1, "VARCHAR") is None  # an enum: not built in


@pytest.mark.parametrize(
    ("sql", "printed"),
    [
        ("select generate_series(1, 3) as i", "SELECT unnest(generate_series(1, 3)) AS i"),
        ("select pg_catalog.pg_partition_ancestors('16400')",
         "SELECT sb_pg.regclass_oid('16400')"),
    ],
)  # fmt: skip
def test_set_returning_select_list_items(sql: str, printed: str) -> None:
    target = _parse(sql).targetList[0]
    assert select_list.is_series_target(target)
    assert QuotingStream()(select_list.unnest_series(target)) == printed.split("SELECT ", 1)[1]


def test_reg_outputs_of_the_outer_query_are_named() -> None:
    stmt = _parse(
        "select conrelid::regclass as t, x from c where y in (select z::regclass from d) "
        "union all select 1::regclass, 2"
    )
    select_list.name_reg_outputs(stmt)
    assert QuotingStream()(stmt) == (
        "SELECT CAST(CAST(conrelid AS regclass) AS text) AS t, x FROM c "
        "WHERE y IN (SELECT CAST(z AS regclass) FROM d) "
        "UNION ALL SELECT CAST(CAST(1 AS regclass) AS text), 2"
    )
