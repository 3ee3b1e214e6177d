"""The query server's metrics: connections, statements, errors by SQLSTATE, durations.

Under `streambed run` the query server is a child process (`streambed.server.supervisor`)
that may be started again. Its metrics are kept with the client library's multiprocess
mode: the supervisor gives each child `PROMETHEUS_MULTIPROC_DIR` (`children`), the library
then keeps every value in a memory-mapped file of that directory, per process id, and the
parent's /metrics adds them up. Counters of a child that died stay in its file, so they
never go down when the next one starts (even after a SIGKILL: each increment is in the file
at once); its open connections leave the sum when the supervisor marks it dead.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

QUERY_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
)  # fmt: skip


class QueryMetrics:
    """Implements `streambed.server.wire.handler.QueryObserver`; `registry`: where the
    metrics are exposed from in this process (in a supervised child nothing reads it: the
    parent reads the files)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self._open = Gauge(
            "streambed_query_connections",
            "Client connections the query server has open.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self._accepted = Counter(
            "streambed_query_connections_accepted",
            "Client connections the query server accepted.",
            registry=r,
        )
        self._queries = Counter(
            "streambed_queries",
            "SQL statements the query server ran (failed ones too).",
            registry=r,
        )
        self._errors = Counter(
            "streambed_query_errors",
            "Errors the query server sent to clients, by SQLSTATE.",
            ("sqlstate",),
            registry=r,
        )
        self._duration = Histogram(
            "streambed_query_duration_seconds",
            "Duration of a statement, from its start to its last row sent.",
            buckets=QUERY_BUCKETS,
            registry=r,
        )
        self._up = Gauge(
            "streambed_query_server_up",
            "1 while a query server process serves.",
            multiprocess_mode="livemax",
            registry=r,
        )

    def serving(self, up: bool) -> None:
        self._up.set(1.0 if up else 0.0)

    def connection_opened(self) -> None:
        self._accepted.inc()
        self._open.inc()

    def connection_closed(self) -> None:
        self._open.dec()

    def statement(self, seconds: float) -> None:
        self._queries.inc()
        self._duration.observe(seconds)

    def error(self, sqlstate: str) -> None:
        self._errors.labels(sqlstate).inc()
