"""The replication lag in seconds: how far the lake is behind the source. No I/O.

The lake is as fresh as the newest source commit whose changes it holds whole. A commit
read while nothing is buffered (its changes were for no replicated table, or were already
in the lake) leaves the lake that fresh at once; one that buffers changes makes it that
fresh when the flush that writes them ends. The lag is the time since that commit, on the
source's clock, and 0 while the stream is idle and caught up: the source sent a keepalive
and nothing is buffered or open. Until the first flush of a run, the first commit read
stands for the lake's freshness (the lake holds everything before it), and before any
commit is read the lag reads 0 (the slot's unacknowledged WAL says more then).
"""

from __future__ import annotations


class LagClock:
    """Commit times (microseconds since 2000-01-01, as pgoutput sends them) in, lag out."""

    def __init__(self) -> None:
        self._fresh_at: int | None = None  # the lake holds every commit up to this one
        self._pending: int | None = None  # the newest buffered commit, not flushed yet
        self._idle = False

    def read(self, commit_ts: int, *, buffered: bool) -> None:
        """A commit was read; `buffered`: changes wait in the buffer for a flush."""
        self._idle = False
        if buffered:
            self._pending = commit_ts
            if self._fresh_at is None:
                self._fresh_at = commit_ts
        elif self._pending is None:
            self._fresh_at = commit_ts

    def flushed(self) -> None:
        """Everything buffered is in the lake."""
        if self._pending is not None:
            self._fresh_at = self._pending
            self._pending = None

    def dropped(self) -> None:
        """The buffer was dropped (it is read again from the slot)."""
        self._pending = None

    def idle(self) -> None:
        """The source has nothing more to send and nothing is buffered."""
        self._idle = True
        self._pending = None

    def seconds(self, now_ts: int) -> float:
        """The lag at `now_ts` (the same clock and unit as the commit times)."""
        if self._idle or self._fresh_at is None:
            return 0.0
        return max(0.0, (now_ts - self._fresh_at) / 1e6)
