from __future__ import annotations

import pytest

from streambed.core.errors import Kind, StreambedError
from streambed.core.retry import Backoff, Decision, RetryPolicy, Work


def test_grows_exponentially_then_caps() -> None:
    backoff = Backoff(initial=0.5, maximum=10.0, multiplier=2.0, jitter=0.0)
    delays = [backoff.delay(attempt, 0.7) for attempt in range(8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_huge_attempt_numbers_stay_capped() -> None:
    assert Backoff(maximum=30.0).base_delay(10_000) == 30.0


@pytest.mark.parametrize("attempt", [0, 1, 3, 6, 20])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.999, 1.0])
def test_jitter_stays_within_bounds(attempt: int, fraction: float) -> None:
    backoff = Backoff(initial=1.0, maximum=30.0, jitter=0.5)
    base = backoff.base_delay(attempt)
    delay = backoff.delay(attempt, fraction)
    assert base * 0.5 <= delay <= base <= 30.0


def test_jitter_spreads_delays() -> None:
    backoff = Backoff(initial=1.0, jitter=0.5)
    assert backoff.delay(2, 0.0) == 4.0
    assert backoff.delay(2, 1.0) == 2.0
    assert backoff.delay(2, 0.5) == 3.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": 0.0},
        {"initial": 5.0, "maximum": 1.0},
        {"multiplier": 0.5},
        {"jitter": 1.5},
        {"jitter": -0.1},
    ],
)
def test_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        Backoff().delay(-1, 0.5)
    with pytest.raises(ValueError):
        Backoff().delay(0, 1.5)


def test_each_kind_is_retried_or_not_by_its_policy() -> None:
    policy = RetryPolicy()
    retried = {kind for kind in Kind if policy.retries(kind)}
    assert retried == {Kind.SOURCE_UNREACHABLE, Kind.STORAGE, Kind.SOURCE_BUSY}
    assert not policy.decide(StreambedError("x", kind=Kind.STORAGE_AUTH), 0, Work.STREAM).retry
    assert not policy.decide(StreambedError("x", kind=Kind.CONFIG), 0, Work.COPY).retry


def test_a_busy_slot_is_retried_a_few_times_only() -> None:
    policy = RetryPolicy(busy_attempts=3, rand=lambda: 0.0)
    busy = StreambedError("slot is active for PID 1", kind=Kind.SOURCE_BUSY)
    decisions = [policy.decide(busy, attempt, Work.STREAM) for attempt in range(5)]
    assert [d.retry for d in decisions] == [True, True, True, False, False]
    assert [d.delay for d in decisions] == [0.5, 1.0, 2.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("kind", "work", "ceiling"),
    [
        (Kind.SOURCE_UNREACHABLE, Work.STREAM, 30.0),
        (Kind.STORAGE, Work.STREAM, 30.0),
        (Kind.SOURCE_UNREACHABLE, Work.COPY, 60.0),
        (Kind.STORAGE, Work.COPY, 600.0),
    ],
)
def test_ceilings_follow_what_a_retry_costs(kind: Kind, work: Work, ceiling: float) -> None:
    policy = RetryPolicy(rand=lambda: 0.0)
    error = StreambedError("x", kind=kind)
    assert policy.decide(error, 1_000, work) == Decision(True, ceiling)
    assert policy.decide(error, 0, work).delay <= 1.0
