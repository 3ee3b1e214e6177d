"""What the copies hold back from the stream, and what they report when they end.

A table being copied is *blocked*: the stream drops its changes, since the copy's snapshot
will hold them or the slot will send them again. So that the slot sends them again, each
copy *holds* the stream's acknowledgement at the position where its table was first
dropped; the stream is acknowledged no further than the lowest hold. A copy thread
*reports* an `Outcome` when it ends; the pipeline thread takes the outcomes at its next
step, records the committed ones and only then unblocks their tables and releases the holds.

Used from the pipeline thread and the copy thread: every method takes the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from streambed.copy.streamed import Name
from streambed.core.errors import StreambedError


@dataclass(frozen=True)
class Outcome:
    name: Name
    error: StreambedError | None = None
    frontier: int | None = None
    gone: bool = False  # the table no longer exists: unblocked and forgotten


class CopyHolds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocked: set[Name] = set()
        self._holds: dict[Name, int] = {}
        self._outcomes: list[Outcome] = []
        self._position = 0  # the highest LSN acknowledged to the slot by this process

    @property
    def position(self) -> int:
        with self._lock:
            return self._position

    def acked(self, lsn: int) -> None:
        with self._lock:
            self._position = max(self._position, lsn)

    def block(self, name: Name) -> None:
        """Drop the table's changes, without holding the stream (a table not yet copied at
        start: its copy, submitted with a hold, follows)."""
        with self._lock:
            self._blocked.add(name)

    def hold(self, names: Iterable[Name], lsn: int) -> None:
        """Block each table and hold the stream at `lsn` for it (a lower hold stays)."""
        with self._lock:
            for name in names:
                self._blocked.add(name)
                self._holds[name] = min(lsn, self._holds.get(name, lsn))

    def blocked(self, name: Name) -> bool:
        with self._lock:
            return name in self._blocked

    def held(self, name: Name) -> bool:
        """Whether the table's copy is running (or waiting to run again)."""
        with self._lock:
            return name in self._holds

    def ack_limit(self) -> int | None:
        with self._lock:
            return min(self._holds.values()) if self._holds else None

    def report(self, outcome: Outcome) -> None:
        with self._lock:
            self._outcomes.append(outcome)

    def reported(self) -> bool:
        with self._lock:
            return bool(self._outcomes)

    def take(self) -> list[Outcome]:
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
        return outcomes

    def give_back(self, outcomes: list[Outcome]) -> None:
        """Outcomes taken but not recorded (storage failed): taken again at the next step,
        before any reported since."""
        with self._lock:
            self._outcomes[:0] = outcomes

    def release(self, outcome: Outcome) -> None:
        """The copy ended and its outcome is taken: its hold goes. A committed table stays
        blocked until `unblock` (after its commit is recorded); a failed one stays blocked
        and pending; a table that is gone is unblocked now."""
        with self._lock:
            self._holds.pop(outcome.name, None)
            if outcome.gone:
                self._blocked.discard(outcome.name)

    def unblock(self, name: Name) -> None:
        with self._lock:
            self._blocked.discard(name)
