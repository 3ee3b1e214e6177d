"""Heartbeat: a non-transactional logical message written to the source WAL now and then.

An idle source (or one whose changes are all in unpublished tables) otherwise never sends the
slot anything it can acknowledge, and the slot pins WAL. The loop calls `maybe_beat(now)`;
there is no thread. Failures are logged and retried at the next interval, never raised.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from streambed.core.config import redact_url
from streambed.core.lsn import parse_lsn
from streambed.source.connection import DEFAULT_CONNECT_TIMEOUT, sql_connect

logger = logging.getLogger(__name__)

HEARTBEAT_PREFIX = "streambed_heartbeat"


def _emit_sql(server_version: int) -> str:
    """The heartbeat statement; it must also flush WAL, or the walsender cannot see it yet.

    A non-transactional message is not flushed by itself. Postgres 17 has a `flush` argument;
    before that, assigning a transaction id makes the (empty, unpublished) commit flush it.
    """
    if server_version >= 170000:
        return "SELECT pg_logical_emit_message(false, %s, '', true)::text"
    return "SELECT pg_logical_emit_message(false, %s, '')::text, pg_current_xact_id()"


class Heartbeat:
    """Calls pg_logical_emit_message(false, 'streambed_heartbeat', '') every `interval` s.

    `interval` 0 turns it off. The SQL connection opens on the first beat and reopens after a
    failure.
    """

    def __init__(
        self,
        url: str,
        interval: float,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.url = url
        self.interval = interval
        self.connect_timeout = connect_timeout
        self.last_lsn: int | None = None  # LSN of the last heartbeat written
        self.failures = 0  # consecutive failed beats
        self._conn: psycopg.Connection[Any] | None = None
        self._next_at: float | None = None

    def maybe_beat(self, now: float) -> bool:
        """Write a heartbeat if one is due at `now` (a monotonic time); True if written."""
        if self.interval <= 0:
            return False
        if self._next_at is not None and now < self._next_at:
            return False
        self._next_at = now + self.interval
        return self.beat()

    def beat(self) -> bool:
        """Write a heartbeat now; True on success, False (logged) on failure.

        A connection that went stale (source restarted) is replaced at once, once.
        """
        reused = self._conn is not None and not self._conn.closed
        try:
            self.last_lsn = self._emit()
        except Exception as e:  # never fatal: the stream itself reports a dead source
            self._drop_connection()
            if reused:
                try:
                    self.last_lsn = self._emit()
                except Exception as retry_error:
                    return self._failed(retry_error)
            else:
                return self._failed(e)
        self.failures = 0
        return True

    def _emit(self) -> int:
        if self._conn is None or self._conn.closed:
            self._conn = sql_connect(self.url, timeout=self.connect_timeout)
        cursor = self._conn.execute(_emit_sql(self._conn.info.server_version), (HEARTBEAT_PREFIX,))
        row = cursor.fetchone()
        if row is None:  # pragma: no cover - a SELECT of one value returns one row
            raise RuntimeError("pg_logical_emit_message returned no row")
        return parse_lsn(row[0])

    def _failed(self, error: Exception) -> bool:
        self.failures += 1
        logger.warning(
            "heartbeat failed",
            extra={
                "fields": {
                    "source": redact_url(self.url),
                    "error": " ".join(str(error).split()),
                    "failures": self.failures,
                }
            },
        )
        self._drop_connection()
        return False

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                logger.debug("closing the heartbeat connection failed", exc_info=True)
            self._conn = None

    def close(self) -> None:
        self._drop_connection()

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
