"""`left_and_came_back`: when a table's publication rows say it may have been out of the
publication since they were last seen."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streambed.source.setup import left_and_came_back

rows = st.frozensets(st.sampled_from(["all", "table 1", "table 2", "schema 3", "schema 4"]))


def test_a_table_added_back_has_only_new_rows() -> None:
    assert left_and_came_back(frozenset({"table 1"}), frozenset({"table 2"}))
    assert left_and_came_back(frozenset({"table 1", "schema 3"}), frozenset({"schema 4"}))


def test_a_kept_row_means_the_table_stayed_published() -> None:
    assert not left_and_came_back(frozenset({"table 1"}), frozenset({"table 1", "schema 3"}))
    assert not left_and_came_back(frozenset({"table 1", "schema 3"}), frozenset({"schema 3"}))
    assert not left_and_came_back(frozenset({"all"}), frozenset({"all"}))


def test_nothing_to_compare_is_no_evidence() -> None:
    assert not left_and_came_back(None, frozenset({"table 1"}))
    assert not left_and_came_back(frozenset(), frozenset({"table 1"}))
    assert not left_and_came_back(frozenset({"table 1"}), frozenset())


@given(rows, rows, st.sampled_from(["all", "table 9"]))
def test_a_shared_row_is_never_a_gap(
    before: frozenset[str], now: frozenset[str], kept: str
) -> None:
    assert not left_and_came_back(before | {kept}, now | {kept})


@given(rows.filter(bool), rows.filter(bool))
def test_rows_all_replaced_are_always_a_gap(before: frozenset[str], now: frozenset[str]) -> None:
    renamed = frozenset(f"{row} again" for row in now)  # the same kinds, new oids
    assert left_and_came_back(before, renamed)
