"""Spark started early on a `streambed run` that will copy tables.

A start that copies (the first start of a data directory, a copy a crash interrupted, a
requested resync) needs Spark right after it has created its slot. Spark's JVM takes
seconds to start, and so do importing the rest of streambed (pyiceberg, pyarrow, DuckDB)
and starting the query server before that. `prestart` starts Spark on a thread before
those imports, so the two overlap. A start with every table ready keeps
starting Spark lazily, when its first merge too large to run in process needs it
(`STREAMBED_MERGE_LOCAL_BYTES`; a stream of small tables may never).

A copy needs Spark only for a table larger than `STREAMBED_COPY_LOCAL_BYTES`; smaller ones
are copied in streambed's process (`streambed.copy.job.copies_here`). So the thread first
asks the source for the largest table it will copy (a published table that the include
and exclude settings select), and starts Spark only when one is over that line
(or the source cannot be asked). Otherwise the JVM's start, several CPU seconds, would
compete for the cores with the copies it is not needed for; the first merge or large copy
starts Spark when it needs it.

Only the standard library is imported here: this runs before everything else.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from pathlib import Path

from streambed.core.config import Settings

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


def spark_needed(settings: Settings) -> bool:
    """Whether a table this start will copy (published, and selected by
    `STREAMBED_INCLUDE_TABLES` / `STREAMBED_EXCLUDE_TABLES`) is too large to be copied in
    streambed's process; True too when the source cannot be asked (its copy reports why)."""
    if settings.copy_local_bytes == 0:
        return True  # every copy runs on Spark
    try:
        import psycopg

        from streambed.copy.catalog import HEAP_BYTES, TOAST_BYTES
        from streambed.core.errors import Kind, SourceError
        from streambed.core.names import table_selected
        from streambed.source import setup

        # Every table measured as its copy measures it (`table_info`, `copies_here`).
        sizes = f"""
            SELECT n.nspname, c.relname, c.oid, c.relispartition, {HEAP_BYTES} + {TOAST_BYTES}
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p')
              AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'
        """
        with psycopg.connect(
            settings.source_url,
            autocommit=True,
            connect_timeout=10,
            application_name="streambed-prestart",
        ) as conn:
            try:
                published: set[int] | None = {
                    t.relation_id
                    for t in setup.publication_tables(
                        conn, settings.publication, settings.include_tables, settings.exclude_tables
                    )
                }
            except SourceError as e:
                if e.kind is not Kind.SOURCE_SETUP:
                    raise
                published = None  # no publication yet: this start creates it for all tables
            rows = conn.execute(sizes.encode()).fetchall()
    except Exception:
        log.debug("cannot tell the source's largest table; spark starts", exc_info=True)
        return True
    if published is None:  # what the new publication will hold: roots, not partitions
        published = {
            oid
            for schema, name, oid, partition, _ in rows
            if not partition
            and table_selected(schema, name, settings.include_tables, settings.exclude_tables)
        }
    return any(oid in published and size > settings.copy_local_bytes for _, _, oid, _, size in rows)


def prestart(settings: Settings) -> threading.Thread | None:
    """Start the process's Spark on a background thread when this start will copy a
    table too large for streambed's process. A failure is left for the copy's own start
    of Spark to report."""
    if not copies_ahead(settings.state_path):
        return None

    def start() -> None:
        if not spark_needed(settings):
            log.debug("every table is copied in this process: spark starts when needed")
            return
        from streambed.spark.session import get_spark

        try:
            get_spark(settings)
        except Exception:
            log.debug("spark did not start in the background; the copy starts it", exc_info=True)

    thread = threading.Thread(target=start, name="spark-prestart", daemon=True)
    thread.start()
    return thread
