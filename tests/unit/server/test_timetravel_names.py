"""The table argument of `streambed.at_time` and its siblings: `table` or `schema.table`,
each part bare or in double quotes, so any table name can be written."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.server.timetravel import TimeTravelError, split_table_name


@pytest.mark.parametrize(
    ("argument", "expected"),
    [
        ("orders", ("public", "orders")),
        ("shop.orders", ("shop", "orders")),
        ('"Sales Dept"."Order Items"', ("Sales Dept", "Order Items")),
        ('public."dot.ted"', ("public", "dot.ted")),
        ('"a/b".c', ("a/b", "c")),
        ('"say ""hi"""', ("public", 'say "hi"')),
        ("Ünïcode.naïve", ("Ünïcode", "naïve")),
    ],
)
def test_table_arguments(argument: str, expected: tuple[str, str]) -> None:
    assert split_table_name(argument) == expected


@pytest.mark.parametrize("argument", ["", "a.b.c", "public.", '"open', ".orders", 'a."b'])
def test_what_is_not_a_table_name_is_refused_with_how_to_write_one(argument: str) -> None:
    with pytest.raises(TimeTravelError, match=r"is not a table name: write 'table' or") as e:
        split_table_name(argument)
    assert e.value.sqlstate == "42602"


NAMES = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1)


@given(NAMES, NAMES)
def test_any_quoted_name_reads_back(schema: str, table: str) -> None:
    def quoted(part: str) -> str:
        return '"' + part.replace('"', '""') + '"'

    assert split_table_name(f"{quoted(schema)}.{quoted(table)}") == (schema, table)
    assert split_table_name(quoted(table)) == ("public", table)
