"""`streambed run`: build the real components from Settings and run them.

`run` replicates and serves (the query server from a process of its own). The CLI calls it;
tests and benchmarks may call `build_pipeline` to drive the loop in-process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streambed.core.config import Settings
from streambed.core.errors import StateError
from streambed.lake.catalog import is_rest, open_catalog
from streambed.lake.expire import Retention
from streambed.lake.sink import IcebergSink
from streambed.lake.source_catalog import PostgresCatalog
from streambed.lake.storage import check_writable
from streambed.pipeline import Pipeline
from streambed.source.postgres import PostgresSource
from streambed.state.store import StateStore

if TYPE_CHECKING:
    from streambed.copy.manager import CopyManager
    from streambed.metrics.endpoint import RunMetrics
    from streambed.metrics.replication import ReplicationMetrics
    from streambed.server.supervisor import QuerySupervisor

logger = logging.getLogger("streambed")


@dataclass
class Runtime:
    settings: Settings
    state: StateStore
    sink: IcebergSink
    source: PostgresSource
    pipeline: Pipeline

    def close(self) -> None:
        if self.pipeline.copier is not None:
            self.pipeline.copier.close()  # type: ignore[attr-defined]
        self.source.close()
        self.state.close()


def _merger(settings: Settings) -> Callable[[], Any]:
    def make() -> Any:
        from streambed.spark.data_source import fs_options
        from streambed.spark.merger import SparkMerger
        from streambed.spark.session import get_spark

        return SparkMerger(get_spark(settings), fs_options(settings))

    return make


def build_pipeline(
    settings: Settings,
    on_commit: Callable[[int], None] | None = None,
    *,
    copy: bool = True,
    metrics: ReplicationMetrics | None = None,
) -> Runtime:
    """Open state and lake, reconcile them (Iceberg wins), and build the pipeline. With
    `copy`, tables that are not ready are copied (`streambed.copy`) before they stream.
    `metrics`: what the pipeline, the lake, the slot and the copies report to."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    state = StateStore(settings.state_path)
    catalog = open_catalog(settings)
    if not is_rest(settings.catalog_url):  # a REST catalog chooses the tables' locations
        check_writable(settings)
    sink = IcebergSink(
        catalog,
        _merger(settings),
        source=PostgresCatalog(settings.source_url),
        on_incompatible="rewrite" if settings.on_incompatible_schema == "rewrite" else "stop",
        # a running copy manager takes resync requests up within seconds
        resync=state.request_resync if copy else None,
        retention=Retention(settings.snapshot_retention, settings.snapshot_max),
        merge_local_bytes=settings.merge_local_bytes,
        write_mode="copy-on-write" if settings.write_mode == "copy-on-write" else "merge-on-read",
        rewrite_share=settings.rewrite_share,
        observer=metrics,
    )
    reconcile(state, sink)
    source = PostgresSource(
        settings,
        export_snapshot=copy,
        on_slot_health=metrics.slot if metrics is not None else None,
        before_new_slot=_new_slot(settings, state, copy=copy),
    )

    def recover() -> None:  # after a storage failure, before streaming again
        sink.reset()
        reconcile(state, sink)

    pipeline = Pipeline(
        settings,
        source,
        sink,
        state,
        on_commit=on_commit,
        observer=metrics,
        copier=_copier(settings, state, sink, on_commit, metrics) if copy else None,
        recover=recover,
    )
    return Runtime(settings, state, sink, source, pipeline)


def _new_slot(settings: Settings, state: StateStore, *, copy: bool) -> Callable[[bool], None]:
    """What happens before the slot is created: tables streamed from an earlier slot are
    copied again (`copy.manager.copy_streamed_again`); without copies, that is an error."""

    def before(replaced_lost: bool) -> None:
        if copy:
            from streambed.copy.manager import copy_streamed_again

            copy_streamed_again(state, settings.slot, replaced_lost)
        elif any(t.status == "ready" for t in state.tables()):
            raise StateError(
                f"the replication slot {settings.slot} is gone, but the lake holds tables "
                "streamed from it; only a start that copies tables can bring them back"
            )

    return before


def reconcile(state: StateStore, sink: IcebergSink) -> None:
    """Open the lake tables the state store knows and move its frontiers forward to
    Iceberg's (Iceberg wins: a crash, or a lost answer, between a commit and its state)."""
    tables = state.tables()
    sink.load((t.schema, t.name) for t in tables)
    locations = sink.metadata_locations()
    for t in tables:
        lake_lsn = sink.frontier(t.schema, t.name)
        state.reconcile(t.schema, t.name, lake_lsn, locations.get((t.schema, t.name)))


def _copier(
    settings: Settings,
    state: StateStore,
    sink: IcebergSink,
    on_commit: Callable[[int], None] | None,
    metrics: ReplicationMetrics | None,
) -> CopyManager:
    from streambed.copy.manager import CopyManager
    from streambed.copy.progress import ProgressBoard
    from streambed.spark.data_source import fs_options
    from streambed.spark.session import get_spark

    return CopyManager(
        settings,
        state,
        sink,
        sink.catalog,
        lambda: get_spark(settings),
        fs_options(settings),
        base_types=sink.source.base_types if sink.source is not None else None,
        on_commit=on_commit,
        progress=ProgressBoard(
            settings.source_url,
            on_progress=metrics.copy_progress if metrics is not None else None,
        ),
    )


def run(settings: Settings) -> None:
    # Both ports are bound before anything else (a busy one stops the start), and the
    # metrics endpoint (streambed.metrics) answers from then on, while the rest starts.
    # Queries are served by a process of their own, which the pipeline's commits refresh
    # and which is started again if it dies (streambed.server.supervisor).
    from streambed.server.supervisor import query_process

    metrics = None
    query = None
    try:
        if settings.metrics_host_port is not None:
            from streambed.metrics.endpoint import RunMetrics

            metrics = RunMetrics(settings.metrics_host_port)
        query = query_process(settings, metrics.children if metrics is not None else None)
        if metrics is not None:
            metrics.serve(query)
        _run(settings, metrics, query)
    finally:
        if query is not None:
            query.stop()
        if metrics is not None:
            metrics.close()


def _run(settings: Settings, metrics: RunMetrics | None, query: QuerySupervisor | None) -> None:
    runtime = build_pipeline(
        settings,
        on_commit=query.notify if query is not None else None,
        metrics=metrics.replication if metrics is not None else None,
    )
    if query is not None:
        try:
            query.start()
        except BaseException:
            runtime.close()
            raise
    runtime.pipeline.install_signal_handlers()
    if query is not None:
        query.stop_on_signals()
    sweeper = None
    if settings.sweep_interval > 0:
        from streambed.lake.sweep import Sweeper

        sweeper = Sweeper(settings).start()
    try:
        runtime.pipeline.run()
    finally:
        if sweeper is not None:
            sweeper.stop()
        if query is not None:
            query.stop()
        runtime.close()
        _stop_spark()


def _stop_spark() -> None:
    import sys

    if "streambed.spark.session" in sys.modules:
        from streambed.spark.session import stop_spark

        stop_spark()


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
