"""`plan_schema_change`: lake schema + recorded attnums + relation + source catalog → plan."""

from __future__ import annotations

from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, IntegerType, LongType, NestedField, StringType

from streambed.buffer.changes import TableKey
from streambed.core.errors import Kind
from streambed.lake import types as t
from streambed.lake.evolve import ResyncNeeded, plan_schema_change, widens
from streambed.lake.source_catalog import SourceColumn
from streambed.lake.types import with_base_types
from streambed.pgoutput.messages import Relation, RelationColumn

LAKE = Schema(
    NestedField(1, "id", IntegerType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "amount", DecimalType(10, 2), required=False),
    identifier_field_ids=[1],
)
ATTNUMS = {"id": 1, "name": 2, "amount": 3}


def numeric(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


def relation(*columns: tuple[str, int, int]) -> Relation:
    return Relation(
        16400,
        "public",
        "t",
        "d",
        tuple(RelationColumn(int(n == "id"), n, oid, mod) for n, oid, mod in columns),
    )


def source(**attnums: int) -> dict[str, SourceColumn]:
    return {n: SourceColumn(a, n) for n, a in attnums.items()}


BASE = (("id", t.INT4, -1), ("name", t.TEXT, -1), ("amount", t.NUMERIC, numeric(10, 2)))


def test_same_layout_is_no_change() -> None:
    plan = plan_schema_change(LAKE, ATTNUMS, ("id",), relation(*BASE), TableKey((0,)), None)
    assert plan.empty


def test_rename_is_found_by_attnum() -> None:
    rel = relation(BASE[0], ("label", t.TEXT, -1), BASE[2])
    plan = plan_schema_change(
        LAKE, ATTNUMS, ("id",), rel, TableKey((0,)), source(id=1, label=2, amount=3)
    )
    assert plan.renames == (("name", "label"),)
    assert not plan.adds and not plan.drops
    assert plan.attnums == {"id": 1, "label": 2, "amount": 3}


def test_without_the_source_catalog_a_rename_is_a_drop_and_an_add() -> None:
    rel = relation(BASE[0], ("label", t.TEXT, -1), BASE[2])
    plan = plan_schema_change(LAKE, ATTNUMS, ("id",), rel, TableKey((0,)), None)
    assert plan.drops == ("name",)
    assert plan.adds == (("label", StringType(), None),)


def test_add_takes_the_fast_default_and_drop_and_widen() -> None:
    rel = relation(("id", t.INT8, -1), ("amount", t.NUMERIC, numeric(12, 2)), ("flag", t.BOOL, -1))
    columns = {
        "id": SourceColumn(1, "id"),
        "amount": SourceColumn(3, "amount"),
        "flag": SourceColumn(4, "flag", True, "t"),
    }
    plan = plan_schema_change(LAKE, ATTNUMS, ("id",), rel, TableKey((0,)), columns)
    assert plan.drops == ("name",)
    assert plan.widens == (("id", LongType()), ("amount", DecimalType(12, 2)))
    assert plan.adds[0][0] == "flag" and plan.adds[0][2] == "t"
    assert not plan.retypes


def test_incompatible_type_change_is_a_retype() -> None:
    rel = relation(BASE[0], BASE[1], ("amount", t.TEXT, -1))
    plan = plan_schema_change(LAKE, ATTNUMS, ("id",), rel, TableKey((0,)), None)
    assert plan.retypes == (("amount", DecimalType(10, 2), StringType()),)


def test_key_change_is_recorded() -> None:
    plan = plan_schema_change(LAKE, ATTNUMS, ("id",), relation(*BASE), TableKey((0, 1)), None)
    assert plan.key == ("id", "name")


def test_widening_rules() -> None:
    assert widens(IntegerType(), LongType())
    assert widens(DecimalType(10, 2), DecimalType(20, 2))
    assert not widens(DecimalType(10, 2), DecimalType(20, 3))
    assert not widens(LongType(), IntegerType())


def test_domains_become_their_base_type() -> None:
    rel = relation(("id", t.INT4, -1), ("price", 90001, -1), ("code", 90002, 14))
    resolved = with_base_types(rel, {90001: (t.NUMERIC, numeric(10, 2)), 90002: (t.VARCHAR, 9)})
    assert [(c.type_oid, c.type_modifier) for c in resolved.columns] == [
        (t.INT4, -1),
        (t.NUMERIC, numeric(10, 2)),
        (t.VARCHAR, 14),
    ]
    assert with_base_types(rel, {}) is rel


def test_add_with_a_default_that_is_not_a_constant_is_unknown_for_existing_rows() -> None:
    rel = relation(*BASE, ("r", t.FLOAT8, -1), ("note", t.TEXT, -1), ("k", t.INT8, -1))
    columns = {
        **source(id=1, name=2, amount=3),
        "r": SourceColumn(4, "r", unknown_default="random()"),
        "note": SourceColumn(5, "note", True, "x"),
        "k": SourceColumn(6, "k", unknown_default="GENERATED ALWAYS AS IDENTITY"),
    }
    plan = plan_schema_change(LAKE, ATTNUMS, ("id",), rel, TableKey((0,)), columns)
    assert [name for name, _, _ in plan.adds] == ["r", "note", "k"]
    assert plan.unknown == (("r", "random()"), ("k", "GENERATED ALWAYS AS IDENTITY"))


def test_resync_needed_names_the_table_the_column_and_the_fix() -> None:
    error = ResyncNeeded(("public", "t"), (("r", "random()"),))
    assert error.kind is Kind.UNSUPPORTED_SCHEMA  # exit 3: an operator must act
    assert "public.t: column r (DEFAULT random())" in str(error)
    assert "`streambed resync public.t`" in str(error)


def test_a_gone_column_without_a_recorded_attnum_beside_a_new_one_is_ambiguous() -> None:
    # "name" was renamed to "label", but the live catalog had moved on (or the table had no
    # attnums recorded) when "name" was recorded: drop + add would lose its values.
    rel = relation(("id", t.INT4, -1), ("label", t.TEXT, -1), BASE[2])
    live = source(id=1, label=2, amount=3)
    plan = plan_schema_change(LAKE, {"id": 1, "amount": 3}, ("id",), rel, TableKey((0,)), live)
    assert plan.renames == () and plan.ambiguous == ("name",)
    # With the attnum recorded it is a rename, and a plain drop + add is not ambiguous.
    plan = plan_schema_change(LAKE, ATTNUMS, ("id",), rel, TableKey((0,)), live)
    assert plan.renames == (("name", "label"),) and plan.ambiguous == ()
    dropped = relation(("id", t.INT4, -1), BASE[2], ("label", t.TEXT, -1))
    plan = plan_schema_change(
        LAKE, ATTNUMS, ("id",), dropped, TableKey((0,)), source(id=1, amount=3, label=4)
    )
    assert plan.drops == ("name",) and plan.ambiguous == ()
    # Without a source catalog nothing can be known, and nothing is claimed.
    plan = plan_schema_change(LAKE, {}, ("id",), rel, TableKey((0,)), None)
    assert plan.ambiguous == ()


def test_resync_needed_for_an_ambiguous_rename_says_why() -> None:
    error = ResyncNeeded(("public", "t"), (), "column name disappeared while label appeared")
    assert str(error).startswith("public.t: column name disappeared while label appeared.")
    assert "`streambed resync public.t`" in str(error)
