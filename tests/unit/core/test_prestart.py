"""Which starts begin Spark early (`streambed.commands.prestart.copies_ahead`), on a real
state store."""

from __future__ import annotations

from pathlib import Path

from streambed.commands.prestart import copies_ahead
from streambed.state.store import StateStore


def test_a_first_start_copies(tmp_path: Path) -> None:
    assert copies_ahead(tmp_path / "state.db")
    StateStore(tmp_path / "state.db").close()  # created, no table yet
    assert copies_ahead(tmp_path / "state.db")


def test_a_start_with_every_table_ready_does_not(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = StateStore(path)
    try:
        store.register("public", "a", 1, "ready")
        store.register("public", "b", 2, "ready")
        assert not copies_ahead(path)
        store.request_resync("public", "a")
        assert copies_ahead(path)
        store.take_resync_requests()
        assert not copies_ahead(path)
        for status in ("pending", "copying"):
            store.register("public", "b", 2, status)
            assert copies_ahead(path)
    finally:
        store.close()


def test_an_unreadable_state_store_is_left_for_the_store_to_report(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"not a database" * 100)
    assert not copies_ahead(path)
