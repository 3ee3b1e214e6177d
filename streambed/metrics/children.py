"""The directory where supervised query processes keep their metrics (`query`), and what
the parent reads from it.

The parent makes the directory and adds the client library's `MultiProcessCollector` for
it to its registry; the supervisor hands its path to each child in `PROMETHEUS_MULTIPROC_DIR`
(the client library reads it when it is imported, so only the child has it) and, when a
child exits, marks it dead: its live gauges (open connections, up) leave the sums, its
counters and histograms stay. The directory is removed when `streambed run` ends.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
UP: Final = "streambed_query_server_up"


class ChildMetrics:
    """A fresh directory for the children's metric files, read into `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.path = tempfile.mkdtemp(prefix="streambed-metrics-")
        # the client library's multiprocess module has no type annotations
        MultiProcessCollector(registry, path=self.path)  # type: ignore[no-untyped-call]
        self._reader = MultiProcessCollector(None, path=self.path)  # type: ignore[no-untyped-call]

    def exited(self, pid: int) -> None:
        """A child process ended: its live gauges no longer count."""
        mark_process_dead(pid, self.path)  # type: ignore[no-untyped-call]

    def serving(self) -> bool:
        """Whether a child says it serves (`QueryMetrics.serving`)."""
        for metric in self._reader.collect():  # type: ignore[no-untyped-call]
            if metric.name == UP:
                return any(sample.value >= 1 for sample in metric.samples)
        return False

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
