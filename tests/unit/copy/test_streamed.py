"""`StreamedTables`: the running process's poll for tables removed from the publication and
added again, and the resync filter, on a real state store with the source's answers given."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streambed.copy.streamed import MEMBERSHIP_POLL_SECONDS, Name, StreamedTables
from streambed.core.config import Settings
from streambed.source.setup import Membership
from streambed.state.store import StateStore

A: Name = ("public", "a")
B: Name = ("public", "b")
ROWS_A = frozenset({"table 100"})
ROWS_B = frozenset({"table 200", "schema 300"})


class Source:
    """The source's answer to "which tables does the stream send, through which rows";
    None: it cannot be asked. Counts the questions."""

    def __init__(self, members: dict[Name, Membership] | None) -> None:
        self.members = members
        self.asked = 0

    def __call__(self) -> dict[Name, Membership] | None:
        self.asked += 1
        return None if self.members is None else dict(self.members)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[StateStore]:
    with StateStore(tmp_path / "state.db") as store:
        for name, rows in ((A, ROWS_A), (B, ROWS_B)):
            store.register(*name, 1, "ready")
            store.set_membership(*name, rows)
        yield store


def tables(tmp_path: Path, state: StateStore, source: Source) -> StreamedTables:
    settings = Settings.from_env(
        {"STREAMBED_SOURCE_URL": "postgresql://localhost/db", "STREAMBED_DATA_DIR": str(tmp_path)}
    )
    return StreamedTables(settings, state, ask=source)


def logged(caplog: pytest.LogCaptureFixture, message: str) -> list[str]:
    """The tables named by the records whose message holds `message`."""
    return [r.__dict__["fields"]["table"] for r in caplog.records if message in r.getMessage()]


def nothing_held(name: Name) -> bool:
    return False


def first_poll() -> float:
    """A time at which the first poll of a `StreamedTables` made just before is due."""
    return time.monotonic() + MEMBERSHIP_POLL_SECONDS + 1


def test_the_source_is_asked_once_per_poll_interval(tmp_path: Path, state: StateStore) -> None:
    source = Source({A: ROWS_A, B: ROWS_B})
    streamed = tables(tmp_path, state, source)
    due = first_poll()

    assert streamed.changes(time.monotonic(), nothing_held) == []
    assert source.asked == 0  # not due yet
    assert streamed.changes(due, nothing_held) == []
    assert streamed.changes(due + 1, nothing_held) == []
    assert source.asked == 1
    assert streamed.changes(due + MEMBERSHIP_POLL_SECONDS, nothing_held) == []
    assert source.asked == 2


def test_a_table_whose_rows_are_all_new_is_copied_again(
    tmp_path: Path, state: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    source = Source({A: frozenset({"table 101"}), B: ROWS_B})
    streamed = tables(tmp_path, state, source)
    due = first_poll()

    with caplog.at_level(logging.WARNING, logger="streambed.copy"):
        assert streamed.changes(due, nothing_held) == [A]

    a = state.table(*A)
    assert a is not None and a.status == "pending"
    assert state.memberships()[A] == frozenset({"table 101"})  # seen: not copied twice
    b = state.table(*B)
    assert b is not None and b.status == "ready"
    assert logged(caplog, "removed from the publication and added again") == ["public.a"]
    assert streamed.changes(due + MEMBERSHIP_POLL_SECONDS, nothing_held) == []


def test_a_table_that_keeps_one_of_its_rows_stayed_published(
    tmp_path: Path, state: StateStore
) -> None:
    # Published through its schema as well: its own row removed and added back is no gap.
    now = frozenset({"table 201", "schema 300"})
    streamed = tables(tmp_path, state, Source({A: ROWS_A, B: now}))
    due = first_poll()

    assert streamed.changes(due, nothing_held) == []
    b = state.table(*B)
    assert b is not None and b.status == "ready"
    assert state.memberships()[B] == now  # the next comparison is against these


def test_a_table_being_copied_is_looked_at_once_its_copy_ends(
    tmp_path: Path, state: StateStore
) -> None:
    source = Source({A: frozenset({"table 101"}), B: ROWS_B})
    streamed = tables(tmp_path, state, source)
    due = first_poll()

    assert streamed.changes(due, lambda name: name == A) == []
    assert state.memberships()[A] == ROWS_A  # kept: the copy's snapshot may predate the gap
    a = state.table(*A)
    assert a is not None and a.status == "ready"

    assert streamed.changes(due + MEMBERSHIP_POLL_SECONDS, nothing_held) == [A]


def test_a_source_that_cannot_be_asked_is_asked_at_the_next_poll(
    tmp_path: Path, state: StateStore
) -> None:
    source = Source(None)
    streamed = tables(tmp_path, state, source)
    due = first_poll()

    assert streamed.changes(due, nothing_held) == []
    assert state.memberships() == {A: ROWS_A, B: ROWS_B}

    source.members = {A: frozenset({"all"}), B: ROWS_B}
    assert streamed.changes(due + MEMBERSHIP_POLL_SECONDS, nothing_held) == [A]
    assert source.asked == 2


def test_a_table_not_registered_is_left_to_its_relation_message(
    tmp_path: Path, state: StateStore
) -> None:
    new: Name = ("public", "new")
    streamed = tables(tmp_path, state, Source({A: ROWS_A, B: ROWS_B, new: frozenset({"all"})}))
    due = first_poll()

    assert streamed.changes(due, nothing_held) == []
    assert state.table(*new) is None
    assert new not in state.memberships()


class CrashingStore(StateStore):
    """A process that dies between marking a table pending and storing its new rows."""

    def set_membership(self, schema: str, name: str, rows: frozenset[str]) -> None:
        raise KeyboardInterrupt("killed")


def test_a_crash_before_the_new_rows_are_stored_still_copies_the_table(
    tmp_path: Path, state: StateStore
) -> None:
    state.close()
    with CrashingStore(tmp_path / "state.db") as crashing:
        streamed = tables(tmp_path, crashing, Source({A: frozenset({"table 101"}), B: ROWS_B}))
        due = first_poll()
        with pytest.raises(KeyboardInterrupt):
            streamed.changes(due, nothing_held)
    with StateStore(tmp_path / "state.db") as after:
        a = after.table(*A)
        assert a is not None and a.status == "pending"  # the next start copies it
        assert after.memberships()[A] == ROWS_A


def test_resync_requests_are_kept_only_for_streamed_tables(
    tmp_path: Path, state: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    gone: Name = ("public", "gone")
    source = Source({A: ROWS_A})
    streamed = tables(tmp_path, state, source)

    assert streamed.only_streamed([]) == []
    assert source.asked == 0
    with caplog.at_level(logging.WARNING, logger="streambed.copy"):
        assert streamed.only_streamed([A, gone, B]) == [A]
    assert logged(caplog, "resync ignored: the table is not streamed") == [
        "public.gone",
        "public.b",
    ]

    source.members = None  # the copy itself will say what is wrong
    assert streamed.only_streamed([A, gone]) == [A, gone]
