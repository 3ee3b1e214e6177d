"""How long buffered changes wait before the interval trigger flushes them.

A flush's cost is mostly fixed: a commit per table, and a merge that rewrites every file
holding a changed key, whatever the number of keys (updates spread over a table touch
every file). The loop reads nothing while it flushes, so flushing on the setting
(STREAMBED_FLUSH_INTERVAL) when flushes take longer than that spends nearly all the loop's
time flushing: the reading falls behind and the lake's lag grows until the catch-up rule
stretches the interval (measured, `bench/oltp_lag.py`: pgbench TPC-B on 2M accounts, 2.6 s
flushes on a 2 s interval, the loop flushing 84% of the time, the lake 35 s behind).

So the interval is paced by what flushes cost: at least `PACE` times the median duration
of the last `WINDOW` flushes (the median: one slow flush, the first merge of a table or a
moment of contention, does not stretch the next few). The loop then spends at most about
half its time flushing, each flush carries what arrived in one paced interval, and the lag
stays near the interval plus two flushes (one waited for while reading was stopped, one
that writes the change). Cheap flushes leave the setting as it is.

Such a stream is always a few flushes behind, by design: the catch-up rule (see "Catching
up" in `streambed.pipeline`) counts the stream as behind only when the commits it reads are
older than `CATCH_UP_CYCLES` paced cycles (interval plus flush), and than the pipeline's
fixed threshold; stretching the interval of a stream that merely pays slow flushes would
only make it staler. While behind, the interval is the setting stretched by the pipeline's
catch-up factor, or the paced interval if that is longer.
"""

from __future__ import annotations

import statistics
from collections import deque

PACE = 1.0
"""The interval trigger waits at least this many times what recent flushes took."""

WINDOW = 5
"""How many recent flushes the cost is the median of."""

CATCH_UP_CYCLES = 4
"""A stream counts as behind only when its commits are older than this many paced cycles."""


class FlushPacer:
    """The interval trigger's wait: the setting, or longer when flushes cost more."""

    def __init__(self, setting: float) -> None:
        self.setting = setting
        self._recent: deque[float] = deque(maxlen=WINDOW)

    def record(self, seconds: float) -> None:
        """A flush (of committed changes) took `seconds`."""
        self._recent.append(max(0.0, seconds))

    @property
    def cost(self) -> float:
        """Median seconds of the recent flushes (0 before the first)."""
        return statistics.median(self._recent) if self._recent else 0.0

    def interval(self, behind: bool, factor: float) -> float:
        """Seconds buffered changes wait before the interval trigger fires; `behind`: the
        stream is catching up, and the setting is stretched `factor` times."""
        paced = max(self.setting, PACE * self.cost)
        return max(self.setting * factor, paced) if behind else paced

    def behind_after(self, threshold: float) -> float:
        """How old (seconds) a commit read must be for the stream to count as behind: the
        pipeline's `threshold`, or `CATCH_UP_CYCLES` paced cycles if that is longer."""
        cycle = max(self.setting, PACE * self.cost) + self.cost
        return max(threshold, self.setting, CATCH_UP_CYCLES * cycle)
