"""Copy progress per table: rows copied, rows/s and ETA.

Rows are counted where they are produced, in the source: `pg_stat_progress_copy` shows each
running COPY's `tuples_processed`, and every copy worker's connection is named
`streambed-copy <run id>/<partition>` (application_name), so one query per interval from
the driver sees every worker, on one machine or a cluster. A finished partition keeps the
last count seen; a table's count becomes exact when its copy commits.

A table is `starting` until its first rows are counted (Spark planning the copy and, in a
new process, starting its Python workers). rows/s is the rate over the last
`RATE_WINDOW` seconds, counted from when rows began to flow (the last poll that saw none),
so neither that wait nor an earlier, faster or slower phase skews it; the final line gives
the average over the tasks' own time (from the first task's start to the last one's end,
reported with the files: a small copy may start and end between two polls). The ETA
divides the rows left, estimated from `pg_class.reltuples`, by that rate.

On a terminal (stderr is a tty of a known size) the lines are redrawn in place every second,
at the foot of the terminal, under the log lines (`streambed.core.log.LiveRegion`); otherwise one
log line per table every `log_interval` seconds.

`on_progress` (optional; the metrics) hears each table's count at every poll and when its copy
ends: `on_progress(qualified, rows, estimated_rows, running)`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import psycopg

from streambed.core.log import LiveRegion, log, terminal
from streambed.source.copy_session import copy_connect

logger = logging.getLogger("streambed.copy")

RATE_WINDOW = 10.0
"""Seconds of samples rows/s is computed over."""


@dataclass
class TableProgress:
    qualified: str
    run_id: str
    estimated_rows: int
    started: float = field(default_factory=time.monotonic)
    parts: dict[int, int] = field(default_factory=dict)
    finished: float | None = None
    final_rows: int | None = None
    failed: bool = False
    idle_until: float | None = None
    samples: deque[tuple[float, int]] = field(default_factory=deque)
    copying: float | None = None  # the tasks' own time, from the first start to the last end

    @property
    def rows(self) -> int:
        return self.final_rows if self.final_rows is not None else sum(self.parts.values())

    @property
    def flow_started(self) -> float:
        """When rows began to flow: the last poll that counted none, else the copy's start."""
        return self.idle_until if self.idle_until is not None else self.started

    def observe(self, now: float) -> None:
        """Record the count polled at `now`. Keeps the newest sample at least `RATE_WINDOW`
        old and every later one."""
        rows = self.rows
        if rows == 0:
            self.idle_until = now
            return
        self.samples.append((now, rows))
        while len(self.samples) > 1 and self.samples[1][0] <= now - RATE_WINDOW:
            self.samples.popleft()

    def rate(self, now: float) -> float:
        """Rows/s over the last `RATE_WINDOW` seconds of samples (or since rows began to
        flow, if that is more recent); once finished, the average over the tasks' time (a
        copy may run entirely between two polls), else since rows began to flow."""
        if self.finished is not None and self.copying is not None:
            return self.rows / self.copying if self.copying > 0 else 0.0
        if self.finished is not None or not self.samples:
            elapsed = (self.finished or now) - self.flow_started
            return self.rows / elapsed if elapsed > 0 else 0.0
        last, rows = self.samples[-1]
        first, first_rows = self.samples[0]
        if first > last - RATE_WINDOW:  # no sample that old: from the start of the flow
            first, first_rows = self.flow_started, 0
        elapsed = last - first
        return (rows - first_rows) / elapsed if elapsed > 0 else 0.0

    def eta(self, now: float) -> float | None:
        if self.finished is not None:
            return 0.0
        rate = self.rate(now)
        if rate <= 0 or self.estimated_rows <= 0:
            return None
        return max(0.0, (self.estimated_rows - self.rows) / rate)

    def line(self, now: float) -> str:
        if self.failed:
            state = "failed"
        elif self.finished is not None:
            state = "done"
        else:
            state = "copying" if self.rows else "starting"
        eta = self.eta(now)
        eta_text = "-" if eta is None else f"{eta:.0f}s"
        total = f"/~{self.estimated_rows:,}" if self.estimated_rows else ""
        return (
            f"{self.qualified:40} {state:8} {self.rows:>12,}{total} rows "
            f"{self.rate(now):>10,.0f} rows/s  eta {eta_text}"
        )


def parse_progress(rows: list[tuple[Any, ...]]) -> dict[str, dict[int, int]]:
    """(application_name, tuples_processed) rows → run id → partition → rows. Pure."""
    out: dict[str, dict[int, int]] = {}
    for name, tuples in rows:
        if not isinstance(name, str) or not name.startswith("streambed-copy "):
            continue
        run_id, _, part = name[len("streambed-copy ") :].partition("/")
        if part.isdigit():
            out.setdefault(run_id, {})[int(part)] = int(tuples or 0)
    return out


class ProgressBoard:
    """Tracks running copies; a background thread polls the source and shows progress."""

    def __init__(
        self,
        url: str,
        *,
        out: TextIO | None = None,
        interval: float = 1.0,
        log_interval: float = 10.0,
        on_progress: Callable[[str, int, int, bool], None] | None = None,
    ) -> None:
        self.url = url
        self.on_progress = on_progress
        self.region = terminal() if out is None else LiveRegion(out)
        self.live = self.region.live
        self.interval = interval
        self.log_interval = log_interval
        self._tables: dict[str, TableProgress] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._last_log = 0.0

    def start(self, qualified: str, run_id: str, estimated_rows: int) -> None:
        with self._lock:
            self._tables[qualified] = TableProgress(qualified, run_id, estimated_rows)
            if self.on_progress is not None:
                self.on_progress(qualified, 0, estimated_rows, True)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name="streambed-copy-progress", daemon=True
                )
                self._thread.start()

    def finish(
        self,
        qualified: str,
        rows: int | None,
        failed: bool = False,
        copying: float | None = None,
    ) -> None:
        """The copy of `qualified` ended: `rows` copied (None if it failed) in `copying`
        seconds of its tasks' time."""
        with self._lock:
            t = self._tables.get(qualified)
            if t is None:
                return
            t.finished = time.monotonic()
            t.final_rows = rows
            t.failed = failed
            t.copying = copying
            line = t.line(t.finished)
            if self.on_progress is not None:
                self.on_progress(t.qualified, t.rows, t.estimated_rows, False)
        log(logger, "copy finished" if not failed else "copy failed", progress=line.strip())
        if self.live:
            self._show()  # not "copying" under its "copy committed" until the next poll

    def close(self) -> None:
        """Stop following the copies; lines on a terminal stay as they were last drawn."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(5)
        self.region.keep()  # not drawn again under the shutdown's log lines

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            while not self._stop.wait(self.interval):
                if self._ended():
                    return
                conn = self._poll(conn)
                self._show()
        finally:
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()

    def _poll(self, conn: psycopg.Connection[Any] | None) -> psycopg.Connection[Any] | None:
        """Read the copies' counts into the tables; the connection to poll with next (None
        after a failure: the next poll connects again, and the lines show the last counts)."""
        try:
            if conn is None or conn.closed:
                conn = copy_connect(self.url, "streambed-copy-progress")
                conn.autocommit = True
            rows = conn.execute(
                "SELECT a.application_name, p.tuples_processed "
                "FROM pg_stat_progress_copy p JOIN pg_stat_activity a USING (pid) "
                "WHERE a.application_name LIKE 'streambed-copy %%'"
            ).fetchall()
        except Exception:  # the source is away: progress is not worth a failure
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            return None
        self._update(parse_progress(rows))
        return conn

    def _ended(self) -> bool:
        """When every copy has finished: show their last lines once more and leave them on
        the terminal, forget them, and end the thread (`start` begins another)."""
        now = time.monotonic()
        with self._lock:
            if any(t.finished is None for t in self._tables.values()):
                return False
            lines = [t.line(now) for t in self._tables.values()]
            self._tables.clear()
            self._thread = None
        if self.live:
            self.region.show(lines)
            self.region.keep()
        return True

    def _update(self, seen: dict[str, dict[int, int]]) -> None:
        now = time.monotonic()
        with self._lock:
            for t in self._tables.values():
                if t.finished is not None:
                    continue
                for part, rows in seen.get(t.run_id, {}).items():
                    t.parts[part] = max(t.parts.get(part, 0), rows)
                t.observe(now)
                if self.on_progress is not None:
                    self.on_progress(t.qualified, t.rows, t.estimated_rows, True)

    def _show(self) -> None:
        now = time.monotonic()
        with self._lock:
            tables = [t for t in self._tables.values() if t.finished is None or self.live]
            tables.sort(key=lambda t: t.finished is not None)  # running first: a short
            lines = [t.line(now) for t in tables]  # terminal shows those (`LiveRegion.show`)
        if self.live:
            self.region.show(lines)
        elif now - self._last_log >= self.log_interval:
            self._last_log = now
            for line in lines:
                log(logger, "copy progress", progress=line.strip())
