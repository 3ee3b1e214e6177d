"""The SQLite state store, on a real file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from streambed.core.errors import Kind, StateError
from streambed.state import StateStore
from streambed.state.store import WATERMARK_HISTORY


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(tmp_path / "state.db")
    s.register("public", "t", 16384, "pending")
    return s


def test_register_and_read_back(store: StateStore) -> None:
    t = store.table("public", "t")
    assert t is not None
    assert (t.qualified, t.relation_id, t.status, t.frontier_lsn) == (
        "public.t",
        16384,
        "pending",
        None,
    )
    assert store.table("public", "missing") is None
    store.register("public", "a", 1, "ready")
    assert [x.qualified for x in store.tables()] == ["public.a", "public.t"]
    with pytest.raises(ValueError, match="status must be one of"):
        store.register("public", "t", 1, "done")  # type: ignore[arg-type]


def test_register_again_keeps_the_frontier(store: StateStore) -> None:
    store.set_frontier("public", "t", 100, "m1")
    after = store.register("public", "t", 20000, "ready")
    assert (after.relation_id, after.status, after.frontier_lsn, after.metadata_location) == (
        20000,
        "ready",
        100,
        "m1",
    )


def test_frontier_only_moves_forward(store: StateStore) -> None:
    store.set_frontier("public", "t", 100, "m1")
    store.set_frontier("public", "t", 100, "m1-compacted")  # same LSN, new snapshot: fine
    store.set_frontier("public", "t", 200, "m2")
    with pytest.raises(StateError, match="back from 0/C8 to 0/64") as info:
        store.set_frontier("public", "t", 100, "m0")
    assert info.value.kind is Kind.STATE
    t = store.table("public", "t")
    assert t is not None
    assert (t.frontier_lsn, t.metadata_location) == (200, "m2")


def test_frontier_of_unregistered_table_fails(store: StateStore) -> None:
    with pytest.raises(StateError, match=r"public\.nope is not registered"):
        store.set_frontier("public", "nope", 1, "m")


def test_reconcile_moves_forward_to_iceberg(store: StateStore) -> None:
    store.set_frontier("public", "t", 100, "m1")
    t = store.reconcile("public", "t", 300, "m3")  # crash after the Iceberg commit
    assert (t.frontier_lsn, t.metadata_location) == (300, "m3")
    t = store.reconcile("public", "t", 300, "m3-compacted")
    assert t.metadata_location == "m3-compacted"
    assert store.reconcile("public", "t", 300, "m3-compacted") == t


def test_reconcile_from_empty_state(store: StateStore) -> None:
    t = store.reconcile("public", "t", None, None)
    assert t.frontier_lsn is None
    t = store.reconcile("public", "t", 50, "m")
    assert t.frontier_lsn == 50


@pytest.mark.parametrize(("iceberg", "says"), [(100, "is at 0/64"), (None, "has no streambed")])
def test_reconcile_refuses_when_the_store_is_ahead(
    store: StateStore, iceberg: int | None, says: str
) -> None:
    store.set_frontier("public", "t", 200, "m2")
    with pytest.raises(StateError) as info:
        store.reconcile("public", "t", iceberg, "m1")
    message = str(info.value)
    assert "public.t" in message
    assert says in message
    assert "0/C8" in message
    assert "Resync public.t" in message
    t = store.table("public", "t")
    assert t is not None
    assert t.frontier_lsn == 200  # nothing changed


def test_forget_allows_a_fresh_copy(store: StateStore) -> None:
    store.set_frontier("public", "t", 200, "m2")
    store.forget("public", "t")
    assert store.table("public", "t") is None
    store.register("public", "t", 16384, "copying")
    store.set_frontier("public", "t", 50, "new")
    t = store.table("public", "t")
    assert t is not None
    assert t.frontier_lsn == 50


def test_a_forgotten_table_is_listed_until_it_is_registered_or_copied_again(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state.db")
    for name in ("t", "u", "v"):
        store.register("public", name, 16384, "ready")
        store.forget("public", name)
    assert store.forgotten() == [("public", "t"), ("public", "u"), ("public", "v")]
    store.register("public", "t", 16385, "pending")
    store.begin_copy("public", "u", 16386, "run1", "file:///lake/u/data/copy-run1", 10)
    assert store.forgotten() == [("public", "v")]
    store.close()
    store = StateStore(tmp_path / "state.db")  # kept across restarts
    assert store.forgotten() == [("public", "v")]
    store.forget("public", "t")
    store.drop_forgotten("public", "v")
    assert store.forgotten() == [("public", "t")]
    store.close()


def test_memberships_are_kept_until_the_table_is_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = StateStore(path)
    store.register("public", "t", 16384, "ready")
    store.register("public", "u", 16385, "ready")
    store.set_membership("public", "t", frozenset({"table 1", "schema 2"}))
    store.set_membership("public", "u", frozenset({"all"}))
    store.set_membership("public", "t", frozenset({"table 3"}))
    store.close()
    store = StateStore(path)  # durable
    assert store.memberships() == {
        ("public", "t"): frozenset({"table 3"}),
        ("public", "u"): frozenset({"all"}),
    }
    store.forget("public", "t")
    assert store.memberships() == {("public", "u"): frozenset({"all"})}
    store.close()


def test_watermark_history(store: StateStore) -> None:
    assert store.latest_watermark() is None
    for i in range(1, WATERMARK_HISTORY + 11):
        store.record_watermark(i * 10, {"public.t": f"m{i}", "public.u": "u"})
    kept = store.watermarks()
    assert len(kept) == WATERMARK_HISTORY
    assert kept[0].lsn == 110
    latest = store.latest_watermark()
    assert latest is not None
    assert latest.lsn == (WATERMARK_HISTORY + 10) * 10
    assert dict(latest.tables) == {"public.t": f"m{WATERMARK_HISTORY + 10}", "public.u": "u"}
    at = store.watermark_at_or_before(555)
    assert at is not None
    assert (at.lsn, at.tables["public.t"]) == (550, "m55")
    assert store.watermark_at_or_before(100) is None  # expired
    with pytest.raises(StateError, match="refusing to record watermark"):
        store.record_watermark(500, {})
    store.record_watermark(latest.lsn, {"public.t": "again"})  # same LSN: idempotent
    again = store.latest_watermark()
    assert again is not None
    assert again.tables == {"public.t": "again"}


def test_meta(store: StateStore) -> None:
    assert store.get_meta("slot") is None
    store.set_meta("slot", "streambed")
    store.set_meta("slot", "other")
    assert store.get_meta("slot") == "other"
    assert store.get_meta("schema_version") == "1"


def test_survives_reopen_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.db"
    with StateStore(path) as store:
        store.register("s", "t", 1, "ready")
        store.set_frontier("s", "t", 42, "m")
        store.record_watermark(42, {"s.t": "m"})
        store.set_meta("k", "v")
    with StateStore(path) as store:
        t = store.table("s", "t")
        assert t is not None
        assert (t.status, t.frontier_lsn, t.metadata_location) == ("ready", 42, "m")
        w = store.latest_watermark()
        assert w is not None
        assert w.tables == {"s.t": "m"}
        assert store.get_meta("k") == "v"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_failed_write_rolls_back(store: StateStore) -> None:
    store.set_frontier("public", "t", 100, "m1")
    with pytest.raises(StateError):
        store.set_frontier("public", "t", 10, "m0")
    store.set_meta("after", "error")  # the connection is usable, nothing half-done
    assert store.get_meta("after") == "error"


def test_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with StateStore(path) as store:
        store.set_meta("schema_version", "99")
    with pytest.raises(StateError, match="schema version 99"):
        StateStore(path)


def test_shared_between_threads(store: StateStore) -> None:
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(50):
                store.latest_watermark()
                store.tables()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(1, 51):
        store.record_watermark(i, {"public.t": str(i)})
    for t in threads:
        t.join()
    assert errors == []


def test_resync_requests_from_another_process_never_find_the_store_locked(
    tmp_path: Path,
) -> None:
    """`streambed resync` writes a request from its own process while the running one takes
    the queue (read, then delete). A transaction that read before the other process wrote
    cannot take the write lock afterwards in WAL mode: SQLite fails it at once instead of
    waiting. Write transactions take the lock first."""
    path = tmp_path / "state.db"
    running, cli = StateStore(path), StateStore(path)
    requested = [("public", f"t{i}") for i in range(300)]
    taken: list[tuple[str, str]] = []
    errors: list[BaseException] = []

    def take() -> None:
        try:
            while len(taken) < len(requested):
                taken.extend(running.take_resync_requests())
        except BaseException as e:
            errors.append(e)

    taker = threading.Thread(target=take)
    taker.start()
    for schema, name in requested:
        cli.request_resync(schema, name)
    taker.join(60)
    assert not errors, errors
    assert sorted(taken) == sorted(requested)
    running.close()
    cli.close()
