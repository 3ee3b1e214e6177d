"""The query server's views follow the pipeline's commits on a thread of their own.

`streambed run` records a watermark after every flush and every copy it commits. Switching
the views to it (`LakeDatabase.refresh`) used to run in the caller, the pipeline's main
thread: the next flush, or the copy manager's next step, waited for it. A refresh makes
a few dozen short DuckDB calls, each of which gives up the GIL and waits for it again
behind the copy threads, so under a first start's load it took 100-160 ms for two
tables, and a first start of 200 small tables spent 11 of its 15 s refreshing.

Here the caller only signals (`notify`); the thread refreshes to the newest watermark,
so the commits that arrive while it works are taken together by its next refresh. After a
refresh it rests as long as the refresh took (at most `MAX_REST_SECONDS`) before the next:
under a burst of commits (a first start's copies of many small tables) it then holds the
GIL at most half of the time, and a view lags its table's commit by at most two refreshes. A
refresh that fails (the lake's storage unreachable) leaves the views on the watermark
they show, is logged, and is tried again after a backoff or at the next commit: queries
go on being answered, and the pipeline is not stopped by its query server.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final, Protocol

from streambed.core.log import log

logger = logging.getLogger("streambed.server")

RETRY_SECONDS: Final = 1.0
MAX_RETRY_SECONDS: Final = 30.0
MAX_REST_SECONDS: Final = 1.0


class Refreshable(Protocol):
    def refresh(self) -> bool: ...


class ViewRefresher:
    """Calls `database.refresh()` on its thread after each `notify`."""

    def __init__(self, database: Refreshable) -> None:
        self.database = database
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="streambed-views", daemon=True)

    def start(self) -> ViewRefresher:
        self._thread.start()
        return self

    def notify(self, lsn: int | None = None) -> None:
        """A watermark was recorded: refresh soon (never blocks)."""
        del lsn
        with self._idle:
            self._busy = True
        self._wanted.set()

    def wait_idle(self, timeout: float) -> bool:
        """Whether the views were switched to every notified watermark within `timeout`
        (a failed refresh is tried again, so it keeps the refresher busy)."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._busy, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        self._wanted.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = RETRY_SECONDS
        while True:
            self._wanted.wait()
            if self._stopping.is_set():
                return
            self._wanted.clear()
            started = time.monotonic()
            try:
                self.database.refresh()
            except Exception as e:
                log(
                    logger,
                    "query views not refreshed; they show the previous watermark until a "
                    "refresh succeeds",
                    level=logging.WARNING,
                    error=" ".join(str(e).split())[:500],
                    retry_in=f"{delay:.0f}s",
                )
                if self._stopping.wait(delay):
                    return
                delay = min(delay * 2, MAX_RETRY_SECONDS)
                self._wanted.set()
                continue
            delay = RETRY_SECONDS
            with self._idle:
                if not self._wanted.is_set():
                    self._busy = False
                    self._idle.notify_all()
            if self._stopping.wait(min(time.monotonic() - started, MAX_REST_SECONDS)):
                return
