"""Wiring: build the real components from Settings and run them.

`run` replicates and serves (from a process of its own); `serve` only serves; `status`
reports. The CLI calls these; tests and benchmarks may call `build_pipeline` to drive the
loop in-process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from streambed.config import Settings
from streambed.errors import SourceError, StateError
from streambed.lake.catalog import is_rest, open_catalog
from streambed.lake.expire import Retention
from streambed.lake.source_catalog import PostgresCatalog
from streambed.lake.storage import check_writable
from streambed.log import log
from streambed.lsn import format_lsn
from streambed.pipeline import Pipeline
from streambed.replication import setup
from streambed.replication.connection import sql_connect
from streambed.replication.slot_watch import margin_warning, size_text
from streambed.sink import IcebergSink
from streambed.source import PostgresSource
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
        from streambed.merge.executor import SparkMerger
        from streambed.merge.pyarrow_source import fs_options
        from streambed.merge.spark_session import get_spark

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
    from streambed.merge.pyarrow_source import fs_options
    from streambed.merge.spark_session import get_spark

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


def serve(settings: Settings) -> None:
    if settings.query_host_port is None:
        raise SystemExit("STREAMBED_QUERY_LISTEN is empty: nothing to serve")
    from streambed.server.process import start_server

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    state = StateStore(settings.state_path)
    try:
        server, database = start_server(settings, state)
    except BaseException:
        state.close()
        raise
    host = settings.query_host_port[0]
    log(
        logger,
        "query server listening",
        address=f"{host}:{server.port}",
        connect=f"psql -h {host} -p {server.port}",
    )
    stop = threading.Event()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            database.refresh()  # follow commits of a `streambed run` elsewhere
    finally:
        server.stop()
        database.close()
        state.close()


def sweep(settings: Settings, older_than: float | None, *, dry_run: bool, out: TextIO) -> None:
    """Delete (`dry_run`: list) each table's unreferenced data and metadata files older than
    `older_than` seconds (None: `STREAMBED_SWEEP_MIN_AGE`; `streambed.lake.sweep`); writes
    one line per table to `out`.
    Raises `SweepRefused` after the report when a table could not be swept."""
    from streambed.lake.sweep import SweepRefused
    from streambed.lake.sweep import sweep as sweep_tables

    results = sweep_tables(settings, older_than=older_than, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for r in results:
        if r.refused is not None:
            out.write(f"{r.table}: refused, nothing deleted: {r.refused}\n")
        else:
            out.write(
                f"{r.table}: {verb} {len(r.removed)} files and "
                f"{len(r.removed_metadata)} metadata files ({r.removed_bytes:,} bytes), "
                f"kept {r.kept}\n"
            )
        if dry_run:
            out.writelines(f"  {path}\n" for path in [*r.removed, *r.removed_metadata])
    if not results:
        out.write("no tables: nothing to sweep\n")
    refused = [r.table for r in results if r.refused is not None]
    if refused:
        raise SweepRefused(f"sweep refused for {', '.join(refused)}: see the lines above")


def status(settings: Settings) -> str:
    """The tables' states and frontiers (the state store), the tables it no longer streams,
    then the slot as the source sees it (`slot_lines`)."""
    state = StateStore(settings.state_path)
    try:
        tables = state.tables()
        lines = [f"{'table':40} {'status':8} {'frontier':>18}  updated"]
        for t in tables:
            frontier = format_lsn(t.frontier_lsn) if t.frontier_lsn is not None else "-"
            lines.append(f"{t.qualified:40} {t.status:8} {frontier:>18}  {t.updated_at}")
        mark = state.latest_watermark()
        if mark is not None:
            lines.append(f"watermark {format_lsn(mark.lsn)} at {mark.committed_at}")
        forgotten = [f"{schema}.{name}" for schema, name in state.forgotten()]
        if forgotten:
            lines.append(
                "no longer streamed (lake tables kept, not served, still swept): "
                + ", ".join(forgotten)
            )
        lines.extend(slot_lines(settings, streamed=any(t.status == "ready" for t in tables)))
        return "\n".join(lines) + "\n"
    finally:
        state.close()


def slot_lines(settings: Settings, *, streamed: bool) -> list[str]:
    """The slot: whether a client streams from it, the WAL it holds, how much more the
    source lets it hold before invalidating it, and what a missing or invalidated slot
    means for the lake (`streamed`: tables were streamed from it)."""
    slot = settings.slot
    try:
        with sql_connect(settings.source_url, timeout=5) as conn:
            health = setup.slot_health(conn, slot)
    except SourceError as e:
        return [f"slot {slot}: cannot ask the source: {e}"]
    if health is None:
        return [
            f"slot {slot}: missing"
            + (": the next start creates it and copies every table again" if streamed else "")
        ]
    line = (
        f"slot {slot}: {'streaming' if health.active else 'idle'}, wal_status "
        f"{health.wal_status}, {size_text(health.unacknowledged)} not acknowledged, "
        f"{size_text(health.retained)} of WAL retained"
    )
    if health.safe_wal_size is not None:
        line += f", {size_text(health.safe_wal_size)} more before the source may invalidate it"
    lines = [line]
    if health.wal_status == "lost":
        lines.append(
            f"slot {slot}: invalidated by the source (max_slot_wal_keep_size); the next start "
            "replaces it and copies every table again"
        )
    warning = margin_warning(slot, health)
    if warning is not None:
        lines.append(f"warning: {warning}")
    return lines


def _stop_spark() -> None:
    import sys

    if "streambed.merge.spark_session" in sys.modules:
        from streambed.merge.spark_session import stop_spark

        stop_spark()


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
