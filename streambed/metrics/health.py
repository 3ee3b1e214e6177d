"""What /readyz answers: ready when replication streams and, with a query server, when a
query process serves; otherwise each reason. /healthz only says the process answers.

`QueryProcess` is the supervised query process as the endpoint sees it: whether it serves
(for /readyz) and how often it was started again (a counter of /metrics).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from streambed.metrics.children import ChildMetrics


class Streaming(Protocol):
    @property
    def not_streaming(self) -> str | None: ...


class Supervised(Protocol):
    @property
    def pid(self) -> int | None: ...
    @property
    def restarts(self) -> int: ...


class QueryProcess(Collector):
    """The query process under `supervisor`, whose metrics are in `children`; registers
    itself in `registry` for its restart counter."""

    def __init__(
        self, supervisor: Supervised, children: ChildMetrics, registry: CollectorRegistry
    ) -> None:
        self._supervisor = supervisor
        self._children = children
        registry.register(self)

    def problem(self) -> str | None:
        """Why queries are not served now; None when they are."""
        if self._supervisor.pid is None:
            return "the query server's process is not running (starting, or starting again)"
        if not self._children.serving():
            return "the query server's process is starting"
        return None

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "streambed_query_server_restarts",
            "Times the query server's process exited and was started again.",
            value=self._supervisor.restarts,
        )


class Readiness:
    """`problems()`: why `streambed run` is not ready; empty when it is."""

    def __init__(self, replication: Streaming, query: QueryProcess | None) -> None:
        self._replication = replication
        self._query = query

    def problems(self) -> list[str]:
        out = []
        reason = self._replication.not_streaming
        if reason is not None:
            out.append(f"replication: {reason}")
        problem = self._query.problem() if self._query is not None else None
        if problem is not None:
            out.append(f"queries: {problem}")
        return out
