"""`lake_key`: the one decision of a table's lake key, for the stream's tables
(`streambed.source.postgres.PostgresSource.table_key`) and the copy's (`streambed.copy.catalog`)."""

from __future__ import annotations

import pytest

from streambed.buffer.changes import TableKey, lake_key
from streambed.core.errors import Kind, SchemaError
from streambed.pgoutput.messages import KEY_FLAG, Relation, RelationColumn


def _relation(identity: str, *columns: tuple[str, bool]) -> Relation:
    return Relation(
        relation_id=1,
        namespace="public",
        name="t",
        replica_identity=identity,
        columns=tuple(RelationColumn(KEY_FLAG if key else 0, n, 23, -1) for n, key in columns),
    )


def _never() -> tuple[str, ...]:
    raise AssertionError("the primary key is read only for REPLICA IDENTITY FULL")


@pytest.mark.parametrize("identity", ["d", "i"])
def test_default_and_index_identity_use_the_flagged_columns(identity: str) -> None:
    relation = _relation(identity, ("a", False), ("id", True), ("b", True))
    assert lake_key(relation, _never) == TableKey((1, 2))


def test_nothing_identity_is_append_only() -> None:
    key = lake_key(_relation("n", ("a", False)), _never)
    assert key == TableKey(()) and key.append_only


def test_full_identity_uses_the_primary_key_in_index_order() -> None:
    relation = _relation("f", ("a", True), ("id2", True), ("id1", True))
    assert lake_key(relation, lambda: ("id1", "id2")) == TableKey((2, 1))


def test_full_identity_without_primary_key_is_the_whole_row() -> None:
    relation = _relation("f", ("a", True), ("b", True))
    assert lake_key(relation, lambda: ()) == TableKey((), full_row=True)


def test_full_identity_with_key_columns_outside_the_column_list_is_refused() -> None:
    # A publication's column list left `id` out: the stream and the copy both refuse the
    # table (before, the copy made it a whole-row table the stream then refused).
    relation = _relation("f", ("a", True), ("b", True))
    with pytest.raises(SchemaError, match=r"public\.t: primary key columns \['id'\]") as e:
        lake_key(relation, lambda: ("id", "a"))
    assert e.value.kind is Kind.UNSUPPORTED_SCHEMA
    assert "publish all key columns" in str(e.value)
