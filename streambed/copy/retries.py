"""When failed copies run again (the waits themselves come from `streambed.core.retry`).

- A copy that found the source unreachable waits, with every other such copy, for one
  backoff that grows while the source stays away and starts over once a copy commits.
- A copy that failed in Spark or storage is copied again after its own backoff, which grows
  with the table's consecutive failures.
- A copy whose snapshot expired (or whose connection was ended) counts its snapshots, so
  that it fails after a few instead of copying forever; an outage does not count.

Used from the pipeline thread and the copy thread: every method takes the lock.
"""

from __future__ import annotations

import threading

from streambed.copy.streamed import Name
from streambed.core.errors import Kind
from streambed.core.retry import RetryPolicy, Work


class CopyRetries:
    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._waiting: list[Name] = []  # found the source unreachable
        self._unreachable_failures = 0  # consecutive, of every table
        self._storage_failures: dict[Name, int] = {}  # consecutive, per table
        self._again_at: dict[Name, float] = {}  # failed in Spark or storage: when to copy
        self._snapshots: dict[Name, int] = {}  # per table, while its snapshots expire

    def unreachable(self, name: Name) -> None:
        with self._lock:
            self._waiting.append(name)
            self._snapshots.pop(name, None)  # an outage is not the copy's fault

    def take_waiting(self) -> tuple[list[Name], float]:
        """The tables waiting for the source, and how long to wait before copying them."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
            if not waiting:
                return [], 0.0
            attempt = self._unreachable_failures
            self._unreachable_failures += 1
        return waiting, self.policy.delay(Kind.SOURCE_UNREACHABLE, attempt, Work.COPY)

    def storage_failed(self, name: Name, now: float) -> tuple[int, float]:
        """Record a failure in Spark or storage: (the table's consecutive failures, the
        wait before it is copied again)."""
        with self._lock:
            failures = self._storage_failures.get(name, 0)
            self._storage_failures[name] = failures + 1
            delay = self.policy.delay(Kind.STORAGE, failures, Work.COPY)
            self._again_at[name] = now + delay
        return failures + 1, delay

    def any_due(self, now: float) -> bool:
        with self._lock:
            return any(at <= now for at in self._again_at.values())

    def due(self, now: float) -> list[Name]:
        """Tables whose pause after a failure in Spark or storage is over (forgotten here)."""
        with self._lock:
            due = [name for name, at in self._again_at.items() if at <= now]
            for name in due:
                del self._again_at[name]
        return due

    def snapshot_lost(self, name: Name, limit: int) -> int:
        """Count one more snapshot taken by the table's copy; at `limit` the count starts
        over (the copy fails)."""
        with self._lock:
            taken = self._snapshots.get(name, 0) + 1
            self._snapshots[name] = taken
            if taken >= limit:
                del self._snapshots[name]
        return taken

    def committed(self, name: Name) -> None:
        """The table's copy committed: its failures are forgotten, and the source answered."""
        with self._lock:
            self._snapshots.pop(name, None)
            self._storage_failures.pop(name, None)
            self._again_at.pop(name, None)  # a resync copied it meanwhile
            self._unreachable_failures = 0
