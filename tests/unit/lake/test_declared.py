"""The source facts recorded as lake table properties, and read back."""

from __future__ import annotations

from streambed.lake.declared import (
    PROP_COLUMNS,
    DeclaredColumn,
    ForeignKey,
    SourceFacts,
    facts_from_rows,
    facts_of,
)


def test_properties_round_trip() -> None:
    facts = SourceFacts(
        (DeclaredColumn("id", 23, -1, True), DeclaredColumn("tags", 1007, -1, False)),
        (ForeignKey("fk", ("id",), "s", "t", ("tid",), "c", "n", "f", True, True),),
    )
    assert facts_of(facts.properties()) == facts


def test_unreadable_properties_are_no_facts() -> None:
    assert facts_of({PROP_COLUMNS: "[[1]]"}) == SourceFacts()
    assert facts_of({}) == SourceFacts()


def test_rows_for_the_lake_columns_only() -> None:
    columns = [("id", 23, -1, True), ("gone", 25, -1, False), ("ref", 23, -1, False)]
    keys = [
        ("a_fk", "public", "a", ["ref"], ["id"], "a", "a", "s", False, False),
        ("b_fk", "public", "b", ["gone"], ["id"], "a", "c", "s", False, False),
    ]
    facts = facts_from_rows(columns, keys, ["id", "ref"])
    assert [c.name for c in facts.columns] == ["id", "ref"]
    assert [k.name for k in facts.foreign_keys] == ["a_fk"]
