"""The query views follow commits on their own thread (`streambed.server.refresher`): the
caller never waits, commits that arrive during a refresh are taken by the next one, and a
failed refresh is tried again."""

from __future__ import annotations

import threading
import time

import pytest

from streambed.server import refresher
from streambed.server.refresher import ViewRefresher


class SlowDatabase:
    """Counts refreshes; each blocks until released, or raises while `failures` last."""

    def __init__(self, failures: int = 0) -> None:
        self.calls = 0
        self.failures = failures
        self.release = threading.Event()
        self.entered = threading.Event()

    def refresh(self) -> bool:
        self.calls += 1
        self.entered.set()
        if self.failures:
            self.failures -= 1
            raise OSError("storage unreachable")
        assert self.release.wait(10)
        return True


def test_the_caller_does_not_wait_and_commits_during_a_refresh_are_taken_together() -> None:
    db = SlowDatabase()
    views = ViewRefresher(db).start()
    try:
        views.notify(1)  # returns at once although the refresh blocks
        assert db.entered.wait(5)
        for lsn in range(2, 10):
            views.notify(lsn)
        assert not views.wait_idle(0.05)
        db.release.set()
        assert views.wait_idle(5)
        assert db.calls == 2  # the first, then one for the eight that came during it
    finally:
        db.release.set()
        views.stop()


def test_a_failed_refresh_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refresher, "RETRY_SECONDS", 0.01)
    db = SlowDatabase(failures=2)
    db.release.set()
    views = ViewRefresher(db).start()
    try:
        views.notify(1)
        assert views.wait_idle(5)
        assert db.calls == 3 and db.failures == 0
    finally:
        views.stop()


def test_stop_ends_the_thread() -> None:
    db = SlowDatabase()
    views = ViewRefresher(db).start()
    views.stop()
    assert not views._thread.is_alive()
    views.notify(1)  # after the stop: nothing runs
    assert db.calls == 0


class TimedDatabase:
    """Each refresh takes `seconds`; records when each began and ended."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spans: list[tuple[float, float]] = []

    def refresh(self) -> bool:
        began = time.monotonic()
        time.sleep(self.seconds)
        self.spans.append((began, time.monotonic()))
        return True


def test_after_a_refresh_the_next_waits_as_long_as_it_took() -> None:
    """Under a burst of commits the refresher holds the GIL at most half of the time."""
    db = TimedDatabase(0.3)
    views = ViewRefresher(db).start()
    try:
        views.notify(1)
        time.sleep(0.1)
        views.notify(2)  # during the first refresh
        assert views.wait_idle(10)
    finally:
        views.stop()
    (_, first_end), (second_start, _) = db.spans
    assert second_start - first_end >= 0.25
