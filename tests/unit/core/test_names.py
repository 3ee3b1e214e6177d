"""Qualified names as streambed writes and reads them (`streambed.core.names`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.core.names import (
    name_parts,
    pattern_problem,
    qualified,
    split_list,
    split_qualified,
    table_matches,
    table_selected,
)

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


def _pattern(schema: str, name: str) -> str:
    """The pattern naming exactly `schema.name`: both parts quoted."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))


@given(NAMES, NAMES, NAMES, NAMES)
def test_a_quoted_pattern_selects_its_table_and_no_other(a: str, b: str, c: str, d: str) -> None:
    pattern = _pattern(a, b)
    assert pattern_problem(pattern) is None
    assert table_matches(a, b, pattern)
    assert table_matches(c, d, pattern) == ((a, b) == (c, d))


@given(st.lists(st.tuples(NAMES, NAMES), min_size=1, max_size=4), NAMES, NAMES)
def test_a_list_of_quoted_patterns_reads_back_whatever_the_names_hold(
    tables: list[tuple[str, str]], schema: str, name: str
) -> None:
    patterns = split_list(" , ".join(_pattern(*t) for t in tables) + ",")
    assert len(patterns) == len(tables)
    assert table_selected(schema, name, patterns, ()) == ((schema, name) in tables)
    assert table_selected(schema, name, (), patterns) == ((schema, name) not in tables)


@pytest.mark.parametrize(
    ("pattern", "selected", "not_selected"),
    [
        ("public.*", [("public", "a"), ("public", "a.b")], [("sales", "a")]),
        ("a.b.c", [("a.b", "c"), ("a", "b.c")], [("a", "bxc")]),  # as before: the joined text
        ('"a.b".c', [("a.b", "c")], [("a", "b.c")]),
        ('a."b.c"', [("a", "b.c")], [("a.b", "c")]),
        ('public."a,b"', [("public", "a,b")], [("public", "a")]),
        ('"Sales Dept".*', [("Sales Dept", "x"), ("Sales Dept", "y.z")], [("Sales", "Dept.x")]),
        ('public."a*"', [("public", "a*")], [("public", "ab")]),  # quoted: no wildcard
        ('public."[x]?"', [("public", "[x]?")], [("public", "x1")]),
        ('"S*".order_?', [("S*", "order_1")], [("Sx", "order_1"), ("S*", "order_12")]),
        ('"Users"."say ""hi"""', [("Users", 'say "hi"')], [("users", 'say "hi"')]),
    ],
)
def test_patterns_select_by_the_parts_sql_would_read(
    pattern: str, selected: list[tuple[str, str]], not_selected: list[tuple[str, str]]
) -> None:
    for schema, name in selected:
        assert table_matches(schema, name, pattern), (schema, name)
    for schema, name in not_selected:
        assert not table_matches(schema, name, pattern), (schema, name)


def test_lists_split_at_commas_outside_quotes() -> None:
    assert split_list('"a,b".c, public.*,, "x"",y".z ') == ['"a,b".c', "public.*", '"x"",y".z']
    assert split_list('public.a,"open') == ['public.a,"open']  # one item, which is refused


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ('public."open', "leaves a double quote open"),
        ('"a".b.c', "is not schema.table"),
        ('"orders"', "is not schema.table"),
        ('public.""', "is not schema.table"),
    ],
)
def test_a_malformed_quoted_pattern_is_named(pattern: str, problem: str) -> None:
    assert problem in (pattern_problem(pattern) or "")
    assert not table_matches("public", "orders", pattern)


def test_a_bare_pattern_is_never_a_problem() -> None:
    assert pattern_problem("public.*") is None
    assert pattern_problem("orders") is None  # matches nothing, as before
