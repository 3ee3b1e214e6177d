"""Reconnect backoff: exponential, capped, with jitter. Pure: randomness is passed in."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    """Delay before retry number `attempt` (0 for the first retry).

    The un-jittered delay is `initial * multiplier**attempt`, capped at `maximum`. Jitter
    takes off up to `jitter` (a fraction) of it, so many clients do not retry in step; the
    delay is always within [base * (1 - jitter), base] and never above `maximum`.
    """

    initial: float = 0.5
    maximum: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.maximum < self.initial:
            raise ValueError("backoff needs 0 < initial <= maximum")
        if self.multiplier < 1:
            raise ValueError("backoff multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be between 0 and 1")

    def base_delay(self, attempt: int) -> float:
        if attempt < 0:
            raise ValueError("attempt must be 0 or more")
        delay = self.initial
        for _ in range(attempt):  # multiply stepwise: no overflow for huge attempts
            delay *= self.multiplier
            if delay >= self.maximum:
                return self.maximum
        return min(delay, self.maximum)

    def delay(self, attempt: int, random_fraction: float) -> float:
        """The delay for `attempt`, given a uniform random number in [0, 1)."""
        if not 0 <= random_fraction <= 1:
            raise ValueError("random_fraction must be in [0, 1]")
        base = self.base_delay(attempt)
        return base * (1 - self.jitter * random_fraction)


@dataclass
class Retrier:
    """Counts consecutive failures; `next_delay()` after a failure, `reset()` after success."""

    backoff: Backoff = field(default_factory=Backoff)
    rand: Callable[[], float] = random.random
    attempt: int = 0

    def next_delay(self) -> float:
        delay = self.backoff.delay(self.attempt, self.rand())
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0
