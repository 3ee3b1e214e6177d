"""The replication lag from the commits read and flushed (`LagClock`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streambed.metrics.lag import LagClock

S = 1_000_000  # microseconds


def test_nothing_read_yet_reads_zero() -> None:
    assert LagClock().seconds(100 * S) == 0.0


def test_a_buffered_commit_counts_once_flushed_and_the_lag_grows_until_then() -> None:
    clock = LagClock()
    clock.read(10 * S, buffered=True)
    clock.flushed()
    clock.read(20 * S, buffered=True)  # buffered, not in the lake yet
    assert clock.seconds(25 * S) == 15.0
    clock.flushed()
    assert clock.seconds(25 * S) == 5.0


def test_before_the_first_flush_the_first_commit_read_stands_for_the_lake() -> None:
    clock = LagClock()
    clock.read(10 * S, buffered=True)
    clock.read(12 * S, buffered=True)
    assert clock.seconds(30 * S) == 20.0


def test_a_commit_with_nothing_for_the_lake_makes_it_fresh_at_once() -> None:
    clock = LagClock()
    clock.read(10 * S, buffered=True)
    clock.flushed()
    clock.read(40 * S, buffered=False)
    assert clock.seconds(41 * S) == 1.0


def test_an_empty_commit_behind_buffered_changes_does_not_hide_them() -> None:
    clock = LagClock()
    clock.read(10 * S, buffered=True)
    clock.flushed()
    clock.read(20 * S, buffered=True)
    clock.read(30 * S, buffered=False)  # the buffer is still dirty: not fresh
    assert clock.seconds(31 * S) == 21.0


def test_idle_and_caught_up_is_zero_until_the_next_commit() -> None:
    clock = LagClock()
    clock.read(10 * S, buffered=True)
    clock.flushed()
    clock.idle()
    assert clock.seconds(500 * S) == 0.0
    clock.read(600 * S, buffered=True)
    assert clock.seconds(601 * S) == 591.0


def test_dropped_changes_are_not_counted_as_flushed() -> None:
    clock = LagClock()
    clock.read(10 * S, buffered=True)
    clock.flushed()
    clock.read(20 * S, buffered=True)
    clock.dropped()  # read again from the slot
    clock.flushed()
    assert clock.seconds(25 * S) == 15.0


@given(st.lists(st.tuples(st.integers(0, 10**9), st.booleans(), st.sampled_from("fdi-"))))
def test_the_lag_is_never_negative(steps: list[tuple[int, bool, str]]) -> None:
    clock = LagClock()
    actions = {"f": clock.flushed, "d": clock.dropped, "i": clock.idle}
    for ts, buffered, then in steps:
        clock.read(ts, buffered=buffered)
        if then in actions:
            actions[then]()
        assert clock.seconds(0) >= 0.0
