from __future__ import annotations

import pytest

from streambed.replication.backoff import Backoff, Retrier


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


def test_retrier_counts_and_resets() -> None:
    retrier = Retrier(Backoff(initial=1.0, maximum=8.0, jitter=0.0), rand=lambda: 0.0)
    assert [retrier.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert retrier.attempt == 5
    retrier.reset()
    assert retrier.next_delay() == 1.0
