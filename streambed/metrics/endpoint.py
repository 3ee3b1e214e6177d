"""The metrics of one `streambed run` and the endpoint that serves them.

`RunMetrics` binds `STREAMBED_METRICS_LISTEN` when it is made (a busy port is the same
`ConfigError` the query port gives), then holds the registry: the process's own metrics
(CPU, memory, open files), the replication side's (`replication`) and the query processes'
(`children`). `serve` starts the HTTP endpoint, with the query process's supervisor (made,
not necessarily started) for /readyz; `close` stops it and removes the query processes'
metric files.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, ProcessCollector

from streambed.core.listen import METRICS, listen
from streambed.core.log import log
from streambed.metrics.children import ChildMetrics
from streambed.metrics.health import QueryProcess, Readiness, Supervised
from streambed.metrics.http import MetricsServer, logger
from streambed.metrics.replication import ReplicationMetrics


class RunMetrics:
    def __init__(self, host_port: tuple[str, int]) -> None:
        self._listener = listen(*host_port, METRICS)
        self._host = host_port[0]
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.replication = ReplicationMetrics(self.registry)
        self.children = ChildMetrics(self.registry)
        self._server: MetricsServer | None = None

    def serve(self, query: Supervised | None) -> None:
        """Start the endpoint; `query`: the query process's supervisor (None: no query
        server, so /readyz asks only for replication)."""
        process = None if query is None else QueryProcess(query, self.children, self.registry)
        readiness = Readiness(self.replication, process)
        self._server = MetricsServer(self._listener, self.registry, readiness).start()
        log(
            logger,
            "metrics endpoint listening",
            address=f"http://{self._host}:{self._server.port}/metrics",
        )

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
        else:
            self._listener.close()
        self.children.close()
