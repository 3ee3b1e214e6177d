"""Qualified names as streambed writes and reads them (`streambed.names`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.names import name_parts, qualified, split_qualified

NAMES = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1)


@given(NAMES, NAMES)
def test_every_qualified_name_reads_back(schema: str, name: str) -> None:
    text = qualified(schema, name)
    assert split_qualified(text) == (schema, name)
    assert name_parts(text) == [schema, name]


@given(NAMES, NAMES, NAMES, NAMES)
def test_two_tables_never_share_a_qualified_name(a: str, b: str, c: str, d: str) -> None:
    assert (qualified(a, b) == qualified(c, d)) == ((a, b) == (c, d))


@pytest.mark.parametrize(
    ("schema", "name", "text"),
    [
        ("public", "orders", "public.orders"),  # as every watermark held it before
        ("Sales Dept", "Order Items", "Sales Dept.Order Items"),
        ("a.b", "c", '"a.b".c'),
        ("a", "b.c", 'a."b.c"'),
        ("public", 'say "hi"', 'public."say ""hi"""'),
    ],
)
def test_plain_names_stay_plain_and_only_dots_and_quotes_are_quoted(
    schema: str, name: str, text: str
) -> None:
    assert qualified(schema, name) == text


def test_a_name_written_before_names_were_quoted_splits_at_its_first_dot() -> None:
    assert split_qualified("public.dot.ted") == ("public", "dot.ted")
    assert split_qualified('public.say"hi') == ("public", 'say"hi')
