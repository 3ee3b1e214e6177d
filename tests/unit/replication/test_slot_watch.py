"""`slot_watch.margin_warning`: when the slot's margin before invalidation is worth a
warning, and what it says."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from streambed.core.errors import SourceError
from streambed.source.setup import SlotHealth
from streambed.source.slot_watch import LOW_SHARE, SlotWatch, margin_warning, size_text

MB = 1024 * 1024


def health(retained: int | None, safe: int | None, status: str = "reserved") -> SlotHealth:
    return SlotHealth(True, status, retained, retained, safe)


def test_no_warning_while_half_the_limit_is_left() -> None:
    assert margin_warning("s", health(10 * MB, 22 * MB)) is None
    assert margin_warning("s", health(16 * MB, 16 * MB)) is None


def test_a_warning_once_less_than_half_is_left() -> None:
    warning = margin_warning("s", health(20 * MB, 12 * MB))
    assert warning is not None
    assert "slot s holds 20.0 MB of WAL" in warning
    assert "invalidates it after 12.0 MB more" in warning
    assert "every table is then copied again" in warning
    assert "max_slot_wal_keep_size = '...'; SELECT pg_reload_conf()" in warning


def test_past_the_limit_the_next_checkpoint_invalidates_it() -> None:
    warning = margin_warning("s", health(40 * MB, 0, "unreserved"))
    assert warning is not None
    assert "more than max_slot_wal_keep_size" in warning
    assert "at its next checkpoint" in warning


def test_no_warning_without_a_limit_or_for_a_lost_slot() -> None:
    assert margin_warning("s", health(10_000 * MB, None)) is None  # max_slot_wal_keep_size -1
    assert margin_warning("s", health(None, None, "lost")) is None
    assert margin_warning("s", health(40 * MB, 1, "lost")) is None


@given(st.integers(0, 1 << 40), st.integers(-(1 << 30), 1 << 40))
def test_warns_exactly_below_the_share(retained: int, safe: int) -> None:
    limit = retained + safe
    expected = limit > 0 and safe < LOW_SHARE * limit
    assert (margin_warning("s", health(retained, safe)) is not None) == expected


def test_sizes_read_as_people_read_them() -> None:
    assert size_text(None) == "unknown"
    assert size_text(512) == "512 bytes"
    assert size_text(1536) == "1.5 kB"
    assert size_text(32 * MB) == "32.0 MB"
    assert size_text(3 * 1024 * MB) == "3.0 GB"


class Scripted(SlotWatch):
    """A watch whose slot readings are given (no source)."""

    def __init__(self, readings: list[SlotHealth | Exception]) -> None:
        super().__init__("postgresql://unused", "s", every=10, warn_every=100)
        self.readings = readings
        self.reads = 0

    def _health(self) -> SlotHealth | None:
        reading = self.readings[min(self.reads, len(self.readings) - 1)]
        self.reads += 1
        if isinstance(reading, Exception):
            raise reading
        return reading


def test_the_watch_reads_every_interval_and_repeats_a_warning_less_often() -> None:
    low, fine = health(20 * MB, 12 * MB), health(1 * MB, 31 * MB)
    watch = Scripted([low, low, low, low, fine, low])
    assert watch.maybe_check(0) is not None  # the first reading
    assert watch.maybe_check(5) is None and watch.reads == 1  # not due yet
    assert watch.maybe_check(10) is None and watch.reads == 2  # warned 10 s ago
    assert watch.maybe_check(99) is None and watch.reads == 3
    assert watch.maybe_check(110) is not None and watch.reads == 4  # 100 s after the first
    assert watch.maybe_check(120) is None and watch.reads == 5  # comfortable again
    assert watch.maybe_check(130) is not None  # low again: warned at once


def test_a_failed_reading_is_not_raised() -> None:
    watch = Scripted([SourceError("the source is down"), health(20 * MB, 12 * MB)])
    assert watch.maybe_check(0) is None
    assert watch.maybe_check(10) is not None


def test_an_interval_of_zero_turns_the_watch_off() -> None:
    watch = Scripted([health(20 * MB, 12 * MB)])
    watch.every = 0
    assert watch.maybe_check(0) is None and watch.reads == 0


def test_the_thread_checks_until_closed() -> None:
    watch = Scripted([health(20 * MB, 12 * MB)])
    watch.every = 0.01
    watch.start()
    deadline = time.monotonic() + 10
    while watch.reads < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    watch.close()
    reads = watch.reads
    assert reads >= 3
    assert watch.warned is not None
    time.sleep(0.05)
    assert watch.reads == reads  # stopped
