"""Spark started early on a `streambed run` that will copy tables.

A start that copies (the first start of a data directory, a copy a crash interrupted, a
requested resync) needs Spark right after it has created its slot. Spark's JVM takes
3-10 s to start, and importing the rest of streambed (pyiceberg, pyarrow, DuckDB) and
starting the query server take about 3.5 s before that. `prestart` starts Spark on a
thread before those imports, so the two overlap. A start with every table ready keeps
starting Spark lazily, when its first merge needs it (an append-only stream may never).

Only the standard library is imported here: this runs before everything else.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from pathlib import Path

from streambed.config import Settings

log = logging.getLogger(__name__)


def copies_ahead(state_path: Path) -> bool:
    """Whether a start with this state store will copy: none yet, a table not ready, or a
    resync requested. (A table published while streambed was stopped is not seen here; it
    starts Spark when its copy does.)"""
    if not state_path.exists():
        return True
    try:
        uri = f"{state_path.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=1)) as db:
            waiting = db.execute(
                "SELECT (SELECT count(*) FROM tables WHERE status != 'ready')"
                " + (SELECT count(*) FROM resync_requests)"
            ).fetchone()[0]
            tables = db.execute("SELECT count(*) FROM tables").fetchone()[0]
    except sqlite3.Error:
        return False  # the state store reports its own problem when it is opened
    return bool(waiting) or not tables


def prestart(settings: Settings) -> threading.Thread | None:
    """Start the process's Spark on a background thread when this start will copy. A
    failure is left for the copy's own start of Spark to report."""
    if not copies_ahead(settings.state_path):
        return None

    def start() -> None:
        from streambed.merge.spark_session import get_spark

        try:
            get_spark(settings)
        except Exception:
            log.debug("spark did not start in the background; the copy starts it", exc_info=True)

    thread = threading.Thread(target=start, name="spark-prestart", daemon=True)
    thread.start()
    return thread
