"""One retry policy: which failures are retried, and how long to wait before each retry.

Every loop that retries asks `RetryPolicy.decide(error, attempt, work)`: the replication
loop when the source goes away or storage fails during a flush (`Work.STREAM`), the
initial copy when a table's copy fails (`Work.COPY`). Whether an error is retried at all
comes from its kind (`streambed.core.errors.policy`); how long to wait grows with the attempt
(`Backoff`: exponential, capped, with jitter), with ceilings chosen by what a retry costs:

| Failure | Stream (reconnect, flush again) | Copy (copy the table again) |
| --- | --- | --- |
| source unreachable | 0.5 s doubling to 30 s, forever | 1 s doubling to 60 s, forever |
| storage (object store, Spark) | 0.5 s doubling to 30 s, forever | 1 s doubling to 600 s, forever |
| slot in use by another client | 0.5 s doubling to 30 s, 12 times | not met |

A copy retries storage failures at most every ten minutes because a failure that is not
transient (a file Spark cannot read, say) would otherwise cost a whole table's copy every
minute. The slot is retried a few times only: after a crash the source keeps a dead
process's slot active until its walsender notices (`wal_sender_timeout`); after that, another
client really is streaming from it and an operator must act.

Pure: randomness is passed in.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from streambed.core.errors import Kind, Policy, StreambedError, policy


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


class Work(enum.Enum):
    """What a retry repeats, which decides how long it may wait."""

    STREAM = "stream"  # reconnect to the source, or flush again: cheap
    COPY = "copy"  # copy a table again: costs the whole table


@dataclass(frozen=True)
class Decision:
    retry: bool
    delay: float = 0.0  # seconds before the retry; 0 when not retried


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy (see the module doc). Tests pass shorter backoffs."""

    stream: Backoff = field(default_factory=Backoff)
    copy_unreachable: Backoff = field(default_factory=lambda: Backoff(initial=1.0, maximum=60.0))
    copy_storage: Backoff = field(default_factory=lambda: Backoff(initial=1.0, maximum=600.0))
    busy_attempts: int = 12
    rand: Callable[[], float] = random.random

    def decide(self, error: StreambedError, attempt: int, work: Work) -> Decision:
        """Retry `error` after `attempt` earlier consecutive failures (0 for the first)?"""
        if not self.retries(error.kind, attempt):
            return Decision(False)
        return Decision(True, self.delay(error.kind, attempt, work))

    def retries(self, kind: Kind, attempt: int = 0) -> bool:
        if policy(kind) is not Policy.RETRY:
            return False
        return kind is not Kind.SOURCE_BUSY or attempt < self.busy_attempts

    def delay(self, kind: Kind, attempt: int, work: Work) -> float:
        return self._backoff(kind, work).delay(attempt, self.rand())

    def _backoff(self, kind: Kind, work: Work) -> Backoff:
        if work is Work.STREAM:
            return self.stream
        return self.copy_storage if kind is Kind.STORAGE else self.copy_unreachable

    @classmethod
    def immediate(cls) -> RetryPolicy:
        """Retries after a millisecond: for tests of what a retry does, not of its timing."""
        tiny = Backoff(initial=0.001, maximum=0.001)
        return cls(stream=tiny, copy_unreachable=tiny, copy_storage=tiny)
