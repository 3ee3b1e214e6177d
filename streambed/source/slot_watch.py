"""Warns while the slot comes close to what the source lets it hold.

With `max_slot_wal_keep_size` set, the source invalidates a slot that holds more WAL than
that at a checkpoint, and the changes it held are gone: streambed then stops, and its next
start copies every table again (docs/operations.md). A slot holds WAL for as long as the
lake has not acknowledged it: while a table's copy runs (its changes are held until it
commits, `streambed.copy.manager`), and whenever the lake falls behind the source. If the
WAL written during a copy is more than the limit, every start copies again and loses the
slot again. The limit is reloadable, so a warning while the margin shrinks leaves time to
raise it.

The watch runs on a thread of its own (`start`), not in the loop: a flush whose merge
takes minutes is when the slot grows most. At every interval (the heartbeat's, else a
minute) it reads the slot; while less than half of the limit is left (or the slot is past
it), it warns, again every five minutes for as long as that lasts. A failed check is
logged at debug level and tried again at the next interval: the stream reports a source
that is gone. Each reading also goes to `on_health` (the metrics), None when the slot is gone.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import psycopg

from streambed.core.errors import SourceError
from streambed.source import setup
from streambed.source.connection import DEFAULT_CONNECT_TIMEOUT, sql_connect
from streambed.source.setup import SlotHealth

logger = logging.getLogger("streambed.source")

CHECK_SECONDS: Final = 60.0
WARN_SECONDS: Final = 300.0
LOW_SHARE: Final = 0.5
"""Warn when less than this share of `max_slot_wal_keep_size` is left."""
RAISE_IT: Final = (
    "raise max_slot_wal_keep_size on the source now (ALTER SYSTEM SET "
    "max_slot_wal_keep_size = '...'; SELECT pg_reload_conf(); -1 removes the limit)"
)


def size_text(count: int | None) -> str:
    """Bytes as people read them: 512 bytes, 3.2 MB."""
    if count is None:
        return "unknown"
    if count < 1024:
        return f"{count} bytes"
    exponent = min(3, int(math.log(count, 1024)))
    return f"{count / 1024**exponent:.1f} {('kB', 'MB', 'GB')[exponent - 1]}"


def margin_warning(slot: str, health: SlotHealth) -> str | None:
    """What to tell the operator about the slot's margin; None while it is comfortable,
    unlimited, or already lost (the stream then reports it)."""
    held = (
        f"slot {slot} holds {size_text(health.retained)} of WAL, "
        f"{size_text(health.unacknowledged)} of it not yet acknowledged by the lake "
        "(a table's copy holds the slot until it commits)"
    )
    consequence = "every table is then copied again"
    if health.wal_status == "unreserved":
        return (
            f"{held}: that is more than max_slot_wal_keep_size, and the source invalidates "
            f"the slot at its next checkpoint; {consequence}; {RAISE_IT}"
        )
    safe = health.safe_wal_size
    if safe is None or health.retained is None or health.wal_status == "lost":
        return None
    limit = health.retained + safe
    if limit <= 0 or safe >= LOW_SHARE * limit:
        return None
    return (
        f"{held}: the source invalidates it after {size_text(max(safe, 0))} more "
        f"(max_slot_wal_keep_size), and {consequence}; {RAISE_IT}"
    )


class SlotWatch:
    """Reads the slot every `every` seconds; warns every `warn_every` seconds while
    `margin_warning` has something to say. `every` 0 turns it off."""

    def __init__(
        self,
        url: str,
        slot: str,
        *,
        every: float = CHECK_SECONDS,
        warn_every: float = WARN_SECONDS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        on_health: Callable[[SlotHealth | None], None] | None = None,
    ) -> None:
        self.url = url
        self.on_health = on_health
        self.slot = slot
        self.every = every
        self.warn_every = warn_every
        self.connect_timeout = connect_timeout
        self.warned: str | None = None  # the last warning logged
        self._conn: psycopg.Connection[Any] | None = None
        self._next_at: float | None = None
        self._warn_after: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Check on a daemon thread until `close`; no thread when `every` is 0."""
        if self.every <= 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="streambed-slot-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.maybe_check(time.monotonic())
            except Exception:  # never let the thread die silently; the next check retries
                logger.exception("checking slot %s failed", self.slot)
            self._stop.wait(self.every)
        self._close_connection()

    def maybe_check(self, now: float) -> str | None:
        """Check the slot if a check is due at `now` (a monotonic time); the warning logged
        now, if any."""
        if self.every <= 0 or (self._next_at is not None and now < self._next_at):
            return None
        self._next_at = now + self.every
        try:
            health = self._health()
        except (SourceError, psycopg.Error) as e:
            self._close_connection()
            logger.debug("cannot read slot %s: %s", self.slot, " ".join(str(e).split()))
            return None
        if self.on_health is not None:
            self.on_health(health)
        warning = margin_warning(self.slot, health) if health is not None else None
        if warning is None:
            self._warn_after = None
            return None
        if self._warn_after is not None and now < self._warn_after:
            return None
        self._warn_after = now + self.warn_every
        self.warned = warning
        logger.warning(warning)
        return warning

    def _health(self) -> SlotHealth | None:
        if self._conn is None or self._conn.closed:
            self._conn = sql_connect(self.url, timeout=self.connect_timeout)
        return setup.slot_health(self._conn, self.slot)

    def close(self) -> None:
        """Stop the thread (it closes its connection), or close the connection."""
        thread, self._thread = self._thread, None
        if thread is None:
            self._close_connection()
            return
        self._stop.set()
        thread.join(timeout=10)

    def _close_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                logger.debug("closing the slot watch's connection failed", exc_info=True)
            self._conn = None
