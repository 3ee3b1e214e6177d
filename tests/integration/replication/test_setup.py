"""Source setup against a real Postgres: publication, slot, snapshot export, catalog queries."""

from __future__ import annotations

import pytest

from streambed.core.errors import Kind, SourceError
from streambed.source import (
    ReplicationConnection,
    ReplicationStream,
    check_source,
    current_wal_lsn,
    ensure_publication,
    ensure_slot,
    publication_tables,
    slot_position,
    sql_connect,
    table_key,
)
from streambed.source.setup import left_and_came_back, memberships
from tests.fixtures.postgres import PgDatabase
from tests.integration.replication.conftest import PUBLICATION, Source, commits, read_until

pytestmark = pytest.mark.integration


def test_creates_publication_and_slot_once(source: Source) -> None:
    db = source.db
    assert source.publication.created
    assert source.slot_result.created
    assert source.slot_result.consistent_point is not None
    assert source.slot_result.snapshot_name is None
    assert db.psql(
        "SELECT puballtables, pubviaroot FROM pg_publication WHERE pubname = %s", [PUBLICATION]
    ) == [(True, True)]
    before = db.psql(
        "SELECT plugin, slot_type, database, restart_lsn::text FROM pg_replication_slots "
        "WHERE slot_name = %s",
        [source.slot],
    )
    assert before[0][:3] == ("pgoutput", "logical", db.name)

    with sql_connect(db.url) as conn, ReplicationConnection.connect(db.url) as repl:
        check_source(conn)
        again = ensure_publication(conn, PUBLICATION)
        slot_again = ensure_slot(conn, repl, source.slot)
    assert not again.created and again.all_tables and again.publish_via_partition_root
    assert not slot_again.created and slot_again.consistent_point is None
    after = db.psql(
        "SELECT plugin, slot_type, database, restart_lsn::text FROM pg_replication_slots "
        "WHERE slot_name = %s",
        [source.slot],
    )
    assert after == before  # the same slot, not dropped and recreated


def test_never_touches_existing_objects(pg_db: PgDatabase) -> None:
    pg_db.psql("CREATE TABLE a (id int PRIMARY KEY)")
    pg_db.psql("CREATE TABLE b (id int PRIMARY KEY)")
    pg_db.psql("CREATE PUBLICATION mine FOR TABLE a")
    pg_db.psql("SELECT pg_create_logical_replication_slot('theirs', 'pgoutput')")
    restart_before = pg_db.psql(
        "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'theirs'"
    )
    with sql_connect(pg_db.url) as conn, ReplicationConnection.connect(pg_db.url) as repl:
        publication = ensure_publication(conn, "mine")
        slot = ensure_slot(conn, repl, "theirs")
        tables = publication_tables(conn, "mine")
    assert not publication.created and not publication.all_tables
    assert not slot.created
    assert [t.qualified_name for t in tables] == ["public.a"]  # not widened to b
    assert (
        pg_db.psql("SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'theirs'")
        == restart_before
    )


def test_a_publication_leaving_out_operations_is_warned_about(
    pg_db: PgDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    pg_db.psql("CREATE TABLE a (id int PRIMARY KEY)")
    via_root = "publish_via_partition_root = true"
    options = f"publish = 'insert, update', {via_root}"
    pg_db.psql(f"CREATE PUBLICATION appends FOR TABLE a WITH ({options})")
    pg_db.psql(f"CREATE PUBLICATION whole FOR TABLE a WITH ({via_root})")
    with sql_connect(pg_db.url) as conn:
        with caplog.at_level("WARNING", logger="streambed.replication.setup"):
            assert ensure_publication(conn, "whole").unpublished == ()
        assert not caplog.records
        with caplog.at_level("WARNING", logger="streambed.replication.setup"):
            appends = ensure_publication(conn, "appends")
    assert appends.unpublished == ("deletes", "truncates")
    (record,) = caplog.records
    assert "does not publish deletes, truncates" in record.getMessage()
    assert "not an exact copy" in record.getMessage()


def test_existing_slot_of_another_kind_is_a_setup_error(pg_db: PgDatabase) -> None:
    slot = "phys_" + pg_db.name  # a physical slot has no database: drop it here
    pg_db.psql("SELECT pg_create_physical_replication_slot(%s)", [slot])
    try:
        with (
            sql_connect(pg_db.url) as conn,
            ReplicationConnection.connect(pg_db.url) as repl,
            pytest.raises(SourceError) as caught,
        ):
            ensure_slot(conn, repl, slot)
        assert caught.value.kind is Kind.SOURCE_SETUP
        assert "STREAMBED_SLOT" in str(caught.value)
        assert pg_db.psql(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
            [slot],
        ) == [(1,)]
    finally:
        pg_db.psql("SELECT pg_drop_replication_slot(%s)", [slot])


def test_exported_snapshot_and_consistent_point_meet_exactly(pg_db: PgDatabase) -> None:
    pg_db.psql("CREATE TABLE t (id int PRIMARY KEY, v text)")
    pg_db.psql("INSERT INTO t SELECT g, 'before' FROM generate_series(1, 100) g")
    slot_name = "snap_" + pg_db.name
    with sql_connect(pg_db.url) as conn, ReplicationConnection.connect(pg_db.url) as repl:
        ensure_publication(conn, PUBLICATION)
        slot = ensure_slot(conn, repl, slot_name, export_snapshot=True)
        assert slot.created and slot.snapshot_name and slot.consistent_point
        pg_db.psql("INSERT INTO t VALUES (101, 'after')")
        with pg_db.connect() as copier:
            copier.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            copier.execute(f"SET TRANSACTION SNAPSHOT '{slot.snapshot_name}'")
            copied = copier.execute("SELECT count(*), max(id) FROM t").fetchone()
            copier.execute("COMMIT")
        assert copied == (100, 100)  # the snapshot does not see the later insert
        assert slot_position(conn, slot_name) is not None
    # The stream from the consistent point carries exactly the insert the copy missed.
    with ReplicationStream.start(pg_db.url, slot_name, PUBLICATION, slot.consistent_point) as s:
        messages = read_until(s, lambda m: len(commits(m)) >= 1)
    inserts = [m.payload for m in messages if m.payload[:1] == b"I"]
    assert len(inserts) == 1 and b"after" in inserts[0] and b"101" in inserts[0]


def test_publication_tables_filters_and_partitions(pg_db: PgDatabase) -> None:
    pg_db.psql("CREATE SCHEMA sales")
    pg_db.psql("CREATE TABLE public.users (id int PRIMARY KEY)")
    pg_db.psql("CREATE TABLE public.users_audit (id int)")
    pg_db.psql("CREATE TABLE sales.orders (id int, day date, PRIMARY KEY (id, day))")
    pg_db.psql("CREATE TABLE sales.events (id int, day date) PARTITION BY RANGE (day)")
    pg_db.psql(
        "CREATE TABLE sales.events_2024 PARTITION OF sales.events "
        "FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')"
    )
    with sql_connect(pg_db.url) as conn:
        ensure_publication(conn, PUBLICATION)

        def names(include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> list[str]:
            tables = publication_tables(conn, PUBLICATION, include, exclude)
            return [t.qualified_name for t in tables]

        assert names() == ["public.users", "public.users_audit", "sales.events", "sales.orders"]
        assert names(("sales.*",)) == ["sales.events", "sales.orders"]
        assert names((), ("*_audit",)) == ["public.users", "sales.events", "sales.orders"]
        assert names(("public.*",), ("public.users_*",)) == ["public.users"]
        assert names(("Public.*",)) == []  # case-sensitive, like Postgres identifiers
        (users,) = publication_tables(conn, PUBLICATION, ("public.users",))
        oid = pg_db.psql("SELECT 'public.users'::regclass::oid")[0][0]
        assert users.relation_id == oid and users.schema == "public" and users.name == "users"

        with pytest.raises(SourceError) as caught:
            publication_tables(conn, "missing_pub")
        assert caught.value.kind is Kind.SOURCE_SETUP
        assert "CREATE PUBLICATION missing_pub" in str(caught.value)


def test_memberships_name_the_rows_that_publish_each_table(pg_db: PgDatabase) -> None:
    pg_db.psql("CREATE SCHEMA s")
    pg_db.psql("CREATE TABLE a (id int PRIMARY KEY)")
    pg_db.psql("CREATE TABLE s.b (id int PRIMARY KEY)")
    pg_db.psql("CREATE TABLE p (id int PRIMARY KEY) PARTITION BY RANGE (id)")
    pg_db.psql("CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10)")
    pg_db.psql("CREATE PUBLICATION listed FOR TABLE a, p, TABLES IN SCHEMA s")
    pg_db.psql("CREATE PUBLICATION every FOR ALL TABLES")

    def row(query: str) -> str:
        return str(pg_db.psql(query)[0][0])

    with sql_connect(pg_db.url) as conn:
        before = memberships(conn, "listed")
        a_row = row("SELECT oid FROM pg_publication_rel WHERE prrelid = 'a'::regclass")
        p_row = row("SELECT oid FROM pg_publication_rel WHERE prrelid = 'p'::regclass")
        s_row = row("SELECT oid FROM pg_publication_namespace WHERE pnnspid = 's'::regnamespace")
        assert before == {
            ("public", "a"): {f"table {a_row}"},
            ("public", "p1"): {f"table {p_row}"},  # published through its partitioned parent
            ("s", "b"): {f"schema {s_row}"},
        }
        pg_db.psql("ALTER PUBLICATION listed DROP TABLE a")
        pg_db.psql("ALTER PUBLICATION listed ADD TABLE a")
        pg_db.psql("ALTER PUBLICATION listed ADD TABLE s.b")  # also listed now
        after = memberships(conn, "listed")
        assert left_and_came_back(before[("public", "a")], after[("public", "a")])
        assert not left_and_came_back(before[("s", "b")], after[("s", "b")])
        assert len(after[("s", "b")]) == 2
        assert after[("public", "p1")] == before[("public", "p1")]
        assert memberships(conn, "every", exclude=("s.*", "public.p*")) == {
            ("public", "a"): {"all"}
        }


def test_table_key_and_replica_identity(pg_db: PgDatabase) -> None:
    pg_db.psql("CREATE TABLE k (a int, b text, c int NOT NULL, PRIMARY KEY (b, a))")
    pg_db.psql("CREATE TABLE f (a int PRIMARY KEY)")
    pg_db.psql("ALTER TABLE f REPLICA IDENTITY FULL")
    pg_db.psql("CREATE TABLE nokey (a int)")
    pg_db.psql("CREATE TABLE idx (a int PRIMARY KEY, c int NOT NULL)")
    pg_db.psql("CREATE UNIQUE INDEX idx_c ON idx (c)")
    pg_db.psql("ALTER TABLE idx REPLICA IDENTITY USING INDEX idx_c")

    def oid(name: str) -> int:
        return int(pg_db.psql("SELECT %s::regclass::oid", [name])[0][0])

    with sql_connect(pg_db.url) as conn:
        key = table_key(conn, oid("k"))
        assert key.primary_key == ("b", "a")
        assert key.replica_identity == "d" and key.identity_columns == ("b", "a")
        full = table_key(conn, oid("f"))
        assert full.primary_key == ("a",) and full.replica_identity == "f"
        assert full.identity_columns == ()
        nokey = table_key(conn, oid("nokey"))
        assert nokey.primary_key == () and nokey.replica_identity == "d"
        idx = table_key(conn, oid("idx"))
        assert idx.primary_key == ("a",) and idx.replica_identity == "i"
        assert idx.identity_columns == ("c",)
        with pytest.raises(SourceError):
            table_key(conn, 1)


def test_wal_lsn_and_slot_position(source: Source) -> None:
    db = source.db
    with sql_connect(db.url) as conn:
        before = current_wal_lsn(conn)
        db.psql("INSERT INTO t VALUES (1, 'x')")
        after = current_wal_lsn(conn)
        assert after > before
        position = slot_position(conn, source.slot)
        assert position is not None
        assert position.confirmed_flush_lsn == source.slot_result.consistent_point
        assert position.restart_lsn is not None and position.restart_lsn <= before
        assert not position.active and position.active_pid is None
        assert slot_position(conn, "no_such_slot") is None
