"""`CopyManager` and storage failures: finished copies are not dropped, and what a copy
failed with says whether it is copied again after a pause."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest
from py4j.protocol import Py4JNetworkError

from streambed.copy.holds import Outcome
from streambed.copy.manager import CopyManager, copy_error
from streambed.copy.progress import ProgressBoard
from streambed.core.config import Settings
from streambed.core.errors import Kind, StorageError
from streambed.state.store import StateStore

A = ("public", "a")
B = ("public", "b")


class FlakyLake:
    """The sink's side the manager uses; `load` fails `failures` times first."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.loaded: list[tuple[str, str]] = []

    def load(self, names: Iterable[tuple[str, str]]) -> None:
        if self.failures:
            self.failures -= 1
            raise StorageError("loading public.a: the object store is down")
        self.loaded.extend(names)

    def metadata_locations(self) -> Mapping[tuple[str, str], str]:
        return {}


def manager_for(
    tmp_path: Path, lake: FlakyLake, on_commit: Callable[[int], None] | None = None
) -> CopyManager:
    url = "postgresql://localhost/db"
    settings = Settings.from_env({"STREAMBED_SOURCE_URL": url, "STREAMBED_DATA_DIR": str(tmp_path)})
    return CopyManager(
        settings,
        StateStore(tmp_path / "state.db"),
        lake,
        None,  # type: ignore[arg-type]  # no copy runs here
        lambda: None,  # type: ignore[arg-type, return-value]
        {},
        progress=ProgressBoard(url, out=io.StringIO()),
        on_commit=on_commit,
    )


def test_outcomes_are_taken_again_after_a_storage_failure(tmp_path: Path) -> None:
    lake = FlakyLake(failures=1)
    manager = manager_for(tmp_path, lake)
    manager.holds.hold([A, B], 100)
    manager.holds.report(Outcome(A, frontier=200))
    manager.holds.report(Outcome(B, frontier=200))

    with pytest.raises(StorageError):
        manager.step()
    assert manager.due(0.0)  # both copies are still to be taken
    assert manager.blocked(*A) and manager.blocked(*B)  # unblocked once recorded
    # Their holds too: the pipeline reads the stream again, and while the tables are
    # blocked their changes are dropped, so the slot must not be acknowledged past them.
    assert manager.ack_limit() == 100

    assert manager.step() is True  # committed copies: the stream restarts
    assert lake.loaded == [A, B]
    assert not manager.blocked(*A) and not manager.blocked(*B)
    assert manager.ack_limit() is None  # no hold left
    assert not manager.holds.reported()  # every outcome taken


def test_a_resync_asked_during_a_copy_survives_a_storage_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resync requested while A was copied copies A again once that copy is taken, also
    when the first step that took it failed in storage."""
    lake = FlakyLake(failures=1)
    manager = manager_for(tmp_path, lake)
    submitted: list[tuple[tuple[str, str], ...]] = []
    monkeypatch.setattr(manager, "_submit", lambda names, anchor, hold: submitted.append(names))
    manager.holds.hold([A], 100)
    manager.state.request_resync(*A)
    assert manager.step() is False  # A's copy is running: copied again when it ends
    assert submitted == []
    manager.holds.report(Outcome(A, frontier=200))

    with pytest.raises(StorageError):
        manager.step()
    assert submitted == []
    assert manager.ack_limit() == 100

    assert manager.step() is True
    assert submitted == [(A,)]  # copied again
    assert manager.step() is False and submitted == [(A,)]  # once


def test_copies_finished_together_are_recorded_in_one_watermark(tmp_path: Path) -> None:
    """One watermark, so one refresh of the query views and one restart of the stream, for
    every copy a step takes; its tables are unblocked only once it is recorded."""
    commits: list[int] = []
    lake = FlakyLake(failures=0)
    manager = manager_for(tmp_path, lake, on_commit=commits.append)
    manager.holds.hold([A, B], 100)
    manager.holds.report(Outcome(A, frontier=300))
    manager.holds.report(Outcome(B, frontier=200))

    assert manager.step() is True
    assert commits == [300]
    latest = manager.state.latest_watermark()
    assert latest is not None and latest.lsn == 300
    assert lake.loaded == [A, B]
    assert not manager.blocked(*A) and not manager.blocked(*B)
    assert manager.step() is False and commits == [300]  # nothing new: nothing recorded


def test_a_copy_the_store_refused_stops_the_process(tmp_path: Path) -> None:
    """Another failed copy leaves its table pending; one the object store refused ends the
    pipeline (raised by `step`), which no pause would fix."""
    lake = FlakyLake(failures=0)
    manager = manager_for(tmp_path, lake)
    manager.holds.hold([A, B], 100)
    refused = StorageError("AWS Error ACCESS_DENIED", kind=Kind.STORAGE_AUTH)
    manager.holds.report(Outcome(A, error=StorageError("gone", kind=Kind.SOURCE_SETUP)))
    assert manager.step() is False
    assert manager.blocked(*A)

    manager.holds.report(Outcome(B, error=refused))
    assert manager.due(0.0)
    with pytest.raises(StorageError) as raised:
        manager.step()
    assert raised.value is refused
    assert manager.blocked(*B)
    assert lake.loaded == []


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (OSError("AWS Error NETWORK_CONNECTION during PutObject operation"), Kind.STORAGE),
        (OSError("AWS Error ACCESS_DENIED during PutObject operation"), Kind.STORAGE_AUTH),
        (PermissionError(13, "Permission denied"), Kind.STORAGE_AUTH),
        (ConnectionResetError("reset by peer"), Kind.STORAGE),
        (FileNotFoundError("a data file is gone"), Kind.INTERNAL),
        (ValueError("a bug"), Kind.INTERNAL),
        (StorageError("already typed"), Kind.STORAGE),
        # Spark's JVM ended under a copy: retried (`spark_session` starts another JVM)
        (Py4JNetworkError("Error while sending or receiving"), Kind.STORAGE),
    ],
)
def test_copy_errors_from_the_lake_are_storage_failures(error: Exception, kind: Kind) -> None:
    converted = copy_error(error)
    assert converted.kind is kind
    assert " ".join(str(error).split()) in str(converted)
