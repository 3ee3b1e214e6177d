"""Connection slots of the query server: how many connections may wait for authentication,
and how many authenticated sessions may run.

Two caps, counted apart. A connection takes a pending slot when it is accepted (before any
thread is started for it) and moves to a session slot when its authentication succeeds; a
connection that never authenticates never takes a session slot, so idle or slow sockets
cannot lock authenticated users out. Every thread the server starts holds one slot, so the
number of connection threads is at most the sum of both caps.
"""

from __future__ import annotations

import threading


class Ticket:
    """One connection's claim: pending, then a session, then released."""

    __slots__ = ("admitted", "released")

    def __init__(self) -> None:
        self.admitted = False
        self.released = False


class Slots:
    def __init__(self, max_pending: int, max_sessions: int) -> None:
        self.max_pending = max_pending
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._pending = 0
        self._sessions = 0

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    @property
    def sessions(self) -> int:
        with self._lock:
            return self._sessions

    def reserve(self) -> Ticket | None:
        """A pending slot for a newly accepted connection, or None when all are taken."""
        with self._lock:
            if self._pending >= self.max_pending:
                return None
            self._pending += 1
            return Ticket()

    def sessions_full(self) -> bool:
        with self._lock:
            return self._sessions >= self.max_sessions

    def admit(self, ticket: Ticket) -> bool:
        """Move an authenticated connection from its pending slot to a session slot; False
        (and the pending slot kept until release) when every session slot is taken."""
        with self._lock:
            if ticket.released or ticket.admitted or self._sessions >= self.max_sessions:
                return False
            self._pending -= 1
            self._sessions += 1
            ticket.admitted = True
            return True

    def release(self, ticket: Ticket) -> None:
        """Give back whichever slot the connection holds; a second call does nothing."""
        with self._lock:
            if ticket.released:
                return
            ticket.released = True
            if ticket.admitted:
                self._sessions -= 1
            else:
                self._pending -= 1
