"""The replication process's metrics: what the pipeline, the lake, the slot watch and the
copies report, kept in one Prometheus registry (docs/metrics.md lists each).

`ReplicationMetrics` is handed to those components when they are built (`streambed.commands.run`);
each calls the methods of its own part. They run on the replication loop's thread and on
the slot watch's and copy progress's threads, and never wait on the HTTP endpoint: the
client library's metric objects take a lock of their own for an instant, and a scrape reads
them on the endpoint's threads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streambed.core.names import split_qualified
from streambed.lake.sink import TableStats
from streambed.metrics.lag import LagClock
from streambed.source.setup import SlotHealth
from streambed.source.stream import pg_now

DURATION_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Seconds: flushes and merges take from milliseconds (an append) to minutes (Spark)."""

STARTING: Final = "replication is starting: the stream is not open yet"


class ReplicationMetrics:
    """The metrics of `streambed run`'s replication side, registered in `registry`.
    `now_ts`: the current time in the commit times' unit (microseconds since 2000-01-01)."""

    def __init__(self, registry: CollectorRegistry, now_ts: Callable[[], int] = pg_now) -> None:
        self.registry = registry
        self.lag = LagClock()
        self.not_streaming: str | None = STARTING
        """Why replication is not streaming now; None while it streams (`/readyz`)."""
        r = registry
        table = ("schema", "table")
        Gauge(
            "streambed_replication_lag_seconds",
            "Seconds since the source commit time of the newest change the lake holds; 0 "
            "while the stream is idle and caught up.",
            registry=r,
        ).set_function(lambda: self.lag.seconds(now_ts()))
        Gauge(
            "streambed_streaming",
            "1 while the replication stream is open, 0 while starting, retrying or stopping.",
            registry=r,
        ).set_function(lambda: 0.0 if self.not_streaming else 1.0)
        self._flush = Histogram(
            "streambed_flush_duration_seconds",
            "Duration of a flush: every buffered table written and committed, the state "
            "recorded and the slot acknowledged.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._changes = Counter(
            "streambed_changes_applied",
            "Row changes written to the lake, as the source sent them (before changes of one "
            "key are collapsed), by table and operation (insert, update, delete, truncate).",
            (*table, "operation"),
            registry=r,
        )
        self._merge = Histogram(
            "streambed_merge_duration_seconds",
            "Duration of writing one table's changes before its commit, by how: append (new "
            "rows only), local (files rewritten in this process) or spark.",
            ("mode",),
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._commit = Histogram(
            "streambed_commit_duration_seconds",
            "Duration of one table's Iceberg commit.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._rows = Gauge(
            "streambed_table_rows",
            "Rows in the lake table (its current snapshot).",
            table,
            registry=r,
        )
        self._files = Gauge(
            "streambed_table_data_files", "Data files of the lake table.", table, registry=r
        )
        self._bytes = Gauge(
            "streambed_table_bytes", "Bytes of the lake table's data files.", table, registry=r
        )
        self._frontier = Gauge(
            "streambed_table_frontier_lsn",
            "The source LSN up to which the lake table holds every change (its frontier), "
            "as a number.",
            table,
            registry=r,
        )
        self._retained = Gauge(
            "streambed_slot_retained_wal_bytes",
            "Bytes of WAL the replication slot keeps the source from removing (NaN until "
            "first read).",
            registry=r,
        )
        self._unacknowledged = Gauge(
            "streambed_slot_unacknowledged_wal_bytes",
            "Bytes of WAL written on the source after the position the lake acknowledged.",
            registry=r,
        )
        self._safe = Gauge(
            "streambed_slot_safe_wal_bytes",
            "Bytes of WAL more the slot may hold before the source may invalidate it "
            "(max_slot_wal_keep_size; NaN when unlimited).",
            registry=r,
        )
        self._active = Gauge(
            "streambed_slot_active", "1 while a client streams from the slot.", registry=r
        )
        for gauge in (self._retained, self._unacknowledged, self._safe, self._active):
            gauge.set(float("nan"))
        self._copied = Gauge(
            "streambed_copy_rows",
            "Rows copied by the table's running (or last) initial copy.",
            table,
            registry=r,
        )
        self._estimated = Gauge(
            "streambed_copy_estimated_rows",
            "Rows the source estimates the copied table has (pg_class.reltuples).",
            table,
            registry=r,
        )
        self._copying = Gauge(
            "streambed_copy_running",
            "1 while the table's copy runs, 0 once it ended.",
            table,
            registry=r,
        )

    # ---- the pipeline (`streambed.pipeline.Observer`) ------------------------------------

    def commit_read(self, commit_ts: int, *, buffered: bool) -> None:
        self.lag.read(commit_ts, buffered=buffered)

    def idle(self) -> None:
        self.lag.idle()

    def dropped(self) -> None:
        self.lag.dropped()

    def flushed(self, seconds: float, changes: Mapping[tuple[str, str], Mapping[str, int]]) -> None:
        self.lag.flushed()
        self._flush.observe(seconds)
        for (schema, name), counts in changes.items():
            for operation, count in counts.items():
                self._changes.labels(schema, name, operation).inc(count)

    def streaming(self, reason: str | None) -> None:
        """None: the stream is open; else why it is not."""
        self.not_streaming = reason

    # ---- the lake (`streambed.lake.sink.LakeObserver`) -------------------------------------------

    def table(self, stats: TableStats) -> None:
        labels = (stats.schema, stats.name)
        self._rows.labels(*labels).set(stats.rows)
        self._files.labels(*labels).set(stats.files)
        self._bytes.labels(*labels).set(stats.bytes)
        if stats.frontier_lsn is not None:
            self._frontier.labels(*labels).set(stats.frontier_lsn)

    def forget(self, schema: str, name: str) -> None:
        for gauge in (self._rows, self._files, self._bytes, self._frontier):
            with contextlib.suppress(KeyError):
                gauge.remove(schema, name)

    def written(self, mode: str, seconds: float) -> None:
        self._merge.labels(mode).observe(seconds)

    def committed(self, seconds: float) -> None:
        self._commit.observe(seconds)

    # ---- the slot watch and the copies ------------------------------------------------------

    def slot(self, health: SlotHealth | None) -> None:
        """The slot as last read (None: it does not exist)."""

        def number(value: int | None) -> float:
            return float("nan") if value is None else float(value)

        h = health
        self._retained.set(number(h.retained if h else None))
        self._unacknowledged.set(number(h.unacknowledged if h else None))
        self._safe.set(number(h.safe_wal_size if h else None))
        self._active.set(float(h.active) if h else float("nan"))

    def copy_progress(self, qualified: str, rows: int, estimated_rows: int, running: bool) -> None:
        labels = split_qualified(qualified)
        self._copied.labels(*labels).set(rows)
        self._estimated.labels(*labels).set(max(estimated_rows, 0))
        self._copying.labels(*labels).set(1.0 if running else 0.0)
