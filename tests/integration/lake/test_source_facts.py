"""The sink records what the source declares (types, NOT NULL, foreign keys) with the lake
table when it creates it, and again when the table's layout changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from streambed.buffer.changes import TableDelta, TableKey
from streambed.core.config import Settings
from streambed.lake import types as t
from streambed.lake.catalog import open_catalog
from streambed.lake.declared import DeclaredColumn, ForeignKey, facts_of
from streambed.lake.sink import IcebergSink
from streambed.lake.source_catalog import PostgresCatalog
from streambed.pgoutput.messages import Relation, RelationColumn
from tests.fixtures.postgres import PgDatabase

pytestmark = pytest.mark.integration

TEXT_ARRAY = 1009
KEY = TableKey(columns=(0,))


def _no_merger() -> Any:
    raise AssertionError("an append needs no merge")


def test_the_sink_records_the_source_facts_and_follows_changes(
    pg_db: PgDatabase, tmp_path: Path
) -> None:
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE parent (id int PRIMARY KEY);"
            "CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL "
            "REFERENCES parent (id) ON DELETE CASCADE, doc jsonb, tags text[], "
            "name varchar(20))"
        )
        row = conn.execute("SELECT 'child'::regclass::oid").fetchone()
    assert row is not None
    columns = (
        RelationColumn(1, "id", t.INT4, -1),
        RelationColumn(0, "parent_id", t.INT4, -1),
        RelationColumn(0, "doc", t.JSONB, -1),
        RelationColumn(0, "tags", TEXT_ARRAY, -1),
        RelationColumn(0, "name", t.VARCHAR, 24),
    )
    relation = Relation(int(row[0]), "public", "child", "d", columns)
    catalog = open_catalog(Settings(source_url=pg_db.url, data_dir=tmp_path))
    source = PostgresCatalog(pg_db.url)
    try:
        sink = IcebergSink(catalog, _no_merger, source=source)
        values = (b"1", b"1", b'{"a": 1}', b"{x,y}", b"n")
        sink.apply(TableDelta(relation, KEY, 100, False, (), (values,), final=True))
        facts = facts_of(catalog.load_table(("public", "child")).properties)
        assert facts.columns == (
            DeclaredColumn("id", t.INT4, -1, True),
            DeclaredColumn("parent_id", t.INT4, -1, True),
            DeclaredColumn("doc", t.JSONB, -1, False),
            DeclaredColumn("tags", TEXT_ARRAY, -1, False),
            DeclaredColumn("name", t.VARCHAR, 24, False),
        )
        assert facts.foreign_keys == (
            ForeignKey("child_parent_id_fkey", ("parent_id",), "public", "parent", ("id",),
                       "a", "c", "s"),
        )  # fmt: skip

        # a column added with a foreign key of its own: the next layout records both
        with psycopg.connect(pg_db.url, autocommit=True) as conn:
            conn.execute("ALTER TABLE child ADD COLUMN other int NOT NULL DEFAULT 1 "
                         "REFERENCES parent (id)")  # fmt: skip
        wider = Relation(relation.relation_id, "public", "child", "d",
                         (*columns, RelationColumn(0, "other", t.INT4, -1)))  # fmt: skip
        sink.apply(TableDelta(wider, KEY, 200, False, (), ((*values, b"1"),), final=True))
        facts = facts_of(catalog.load_table(("public", "child")).properties)
        assert facts.columns[-1] == DeclaredColumn("other", t.INT4, -1, True)
        assert [k.name for k in facts.foreign_keys] == [
            "child_other_fkey",
            "child_parent_id_fkey",
        ]
    finally:
        source.close()
