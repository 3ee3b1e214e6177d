"""Which tables need a copy, the per-table state machine, and what the loop may acknowledge.

States (persisted in the state store): `pending` (must be copied) → `copying` (a copy is
running; its run id, output directory and seam are recorded) → `ready` (the lake holds the
table up to its frontier and the loop applies its changes).

The rules the pipeline follows through this class:

- A table that is not `ready` is *blocked*: its frontier reads as `BLOCKED`, so the buffer
  drops its changes. They are not lost: each copy has a *hold*, the acknowledged position
  when the table became blocked, and the stream is never acknowledged past the lowest hold.
- A copy commits the table at `seam - 1` (see `streambed.source.snapshot`) and the table
  becomes `ready`. The loop then restarts the stream: the slot re-sends everything after
  the hold; changes at or below the seam are skipped by the frontier, those above it are
  applied, and tables that were already current skip what they already hold.
- A copy whose snapshot expired (its anchor transaction ended before every task imported
  it), or one of whose tasks lost its connection while reading (`CopyInterrupted`: its
  backend terminated, its statement cancelled), is copied again at once under a new
  snapshot, keeping its hold, up to `SNAPSHOT_ATTEMPTS` snapshots; only then does it fail
  as below.
- A copy that fails because the source is unreachable (restarting, down, the network:
  `Kind.SOURCE_UNREACHABLE`) keeps its hold and is copied again under a new snapshot after
  a backoff (`streambed.core.retry`), for as long as the process runs.
  Snapshots lost before the source was found unreachable do not count towards
  `SNAPSHOT_ATTEMPTS`.
- A copy that fails in Spark or in storage (`Kind.STORAGE`: a Python worker killed, an
  object store error) leaves the table `pending` and blocked, releases its hold, and is
  copied again under a new snapshot after a backoff (up to ten minutes:
  `streambed.core.retry`), as `streambed resync` would, for as long as the process runs.
- A copy the object store refuses (`Kind.STORAGE_AUTH`: credentials revoked or rotated, the
  key no longer allowed to write) stops the process at the next `step`, as a flush refused
  the same way does: retrying cannot fix it. The table stays `pending`.
- Any other failed copy (table dropped, no SELECT permission) leaves the table `pending`
  and blocked, releases its hold, and is retried at the next start or by `streambed
  resync`; the re-copy takes a new snapshot, so the dropped changes are in it.
- At start, copies a crash interrupted are either found committed (their files are live in
  the lake table: the table becomes `ready`) or their files are removed (`pending`).
- A table the stream no longer sends (out of the publication, left out by the settings, or
  dropped) is forgotten at start, before the stream opens: if it is streamed again it is
  copied again, as a new table. A table removed from the publication and added back, at
  any time, is copied again too: none of its publication rows (`setup.Membership`) are
  the ones last seen (`streambed.copy.streamed`: checked at start and every
  `MEMBERSHIP_POLL_SECONDS`).
- A start that creates the slot while tables are `ready` (the earlier slot was dropped,
  invalidated by the source, or is not on the server the source failed over to) copies
  every table again: the changes between the lake's frontiers and the new slot are in no
  slot any more.

Copies run on a background thread (Spark jobs, up to `max_parallel` tables at once); the
pipeline's thread only calls `start`, `relation`, `blocked`, `due` and `step`.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

import psycopg
from pyiceberg.catalog import Catalog

from streambed.buffer.changes import TableKey
from streambed.copy.catalog import TableGone, TableInfo, table_info
from streambed.copy.duck import detach_all
from streambed.copy.here import range_threads
from streambed.copy.holds import CopyHolds, Outcome
from streambed.copy.job import (
    copies_here,
    copy_table,
    discard_uncommitted,
    job_group,
    lake_table,
    output_dir,
)
from streambed.copy.progress import ProgressBoard
from streambed.copy.retries import CopyRetries
from streambed.copy.streamed import Name, StreamedTables
from streambed.core.config import Settings
from streambed.core.errors import Kind, SourceError, StorageError, StreambedError, raised_by_spark
from streambed.core.failpoints import reached
from streambed.core.log import log
from streambed.core.lsn import format_lsn
from streambed.core.names import qualified
from streambed.core.retry import RetryPolicy
from streambed.lake.storage import storage_error
from streambed.lake.types import with_base_types
from streambed.pgoutput.messages import Relation
from streambed.source import setup
from streambed.source.connection import sql_connect
from streambed.source.snapshot import CopyInterrupted, SnapshotAnchor, SnapshotExpired
from streambed.state.store import StateStore, TableState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger("streambed.copy")

BLOCKED: Final = (1 << 64) - 1
"""The frontier of a table that is not ready: every change to it is dropped (and re-read)."""

RESYNC_POLL_SECONDS: Final = 2.0

SNAPSHOT_ATTEMPTS: Final = 3
"""Snapshots a table's copy may take when each expires before its tasks imported it."""

CLOSE_WAIT_SECONDS: Final = 30.0
"""How long `close` waits for the copies running to stop: a copy here stops at its ranges'
next batch, a cancelled Spark job once its tasks are killed."""

CANCEL_EVERY_SECONDS: Final = 0.5
"""While `close` waits, how often it cancels the Spark copies' jobs again."""


@dataclass(frozen=True)
class _Batch:
    names: tuple[Name, ...]
    anchor: SnapshotAnchor | None


class HeldStream:
    """The replication stream, acknowledged no further than the manager allows."""

    def __init__(self, stream: Any, manager: CopyManager) -> None:
        self._stream = stream
        self._manager = manager

    def ack(self, lsn: int) -> None:
        limit = self._manager.ack_limit()
        if limit is not None:
            lsn = min(lsn, limit)
        self._stream.ack(lsn)
        self._manager.acked(lsn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class CopyManager:
    def __init__(
        self,
        settings: Settings,
        state: StateStore,
        lake: Any,
        catalog: Catalog,
        spark: Callable[[], SparkSession],
        fs_options: Mapping[str, str],
        *,
        max_parallel: int = 2,
        progress: ProgressBoard | None = None,
        on_commit: Callable[[int], None] | None = None,
        base_types: Callable[[list[int]], Mapping[int, tuple[int, int]]] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.settings = settings
        self.state = state
        self.lake = lake
        self.catalog = catalog
        self._spark = spark
        self.fs_options = dict(fs_options)
        self.max_parallel = max_parallel
        self.progress = progress or ProgressBoard(settings.source_url)
        self.on_commit = on_commit
        self.base_types = base_types
        self._lock = threading.Lock()
        self._catalog_lock = threading.Lock()
        self.holds = CopyHolds()
        self._queue: queue.Queue[_Batch | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._next_resync_poll = 0.0
        self.streamed = StreamedTables(settings, state)
        self._resync_after: set[Name] = set()  # resync requested while its copy ran or waited
        self.retries = CopyRetries(retry or RetryPolicy())
        self._closing = threading.Event()
        self._spark_copies: dict[str, SparkSession] = {}  # run id → its Spark, while it runs

    # ---- pipeline thread --------------------------------------------------------------

    def start(self, source: Any) -> None:
        """Recover interrupted copies, then start copying every included published table
        that is not ready. Uses the snapshot of a slot created just now, if any."""
        anchor: SnapshotAnchor | None = getattr(source, "initial_snapshot", None)
        source.initial_snapshot = None
        conn = sql_connect(self.settings.source_url)
        try:
            if anchor is not None:
                position = anchor.seam
            else:
                slot = setup.slot_position(conn, self.settings.slot)
                position = slot.confirmed_flush_lsn or 0 if slot is not None else 0
            self.holds.acked(position)
            try:
                self._recover()
            except OSError as e:  # the lake's storage: retried, or stops if it refuses
                failed = storage_error(e, "cannot recover interrupted copies")
                if failed is None:
                    raise
                raise failed from e
            published = setup.publication_tables(
                conn,
                self.settings.publication,
                self.settings.include_tables,
                self.settings.exclude_tables,
            )
            members = setup.memberships(
                conn,
                self.settings.publication,
                self.settings.include_tables,
                self.settings.exclude_tables,
            )
            streamed = {(t.schema, t.name) for t in published}
            left = [t for t in self.state.tables() if (t.schema, t.name) not in streamed]
            by_root = setup.streamed_by_root(
                conn, self.settings.publication, [t.relation_id for t in left]
            )
        finally:
            conn.close()
        for table in left:
            if table.relation_id not in by_root:
                self._no_longer_streamed(table)
        for name in self.streamed.replaced(members, self.holds.held):
            # Out of the publication at some time since it was last streamed: a new table.
            self.state.forget(*name)
            self.streamed.log_replaced(name, "copying it again")
        needed: list[Name] = []
        for t in published:
            current = self.state.table(t.schema, t.name)
            if current is None:
                self.state.register(t.schema, t.name, t.relation_id, "pending")
            if current is None or current.status != "ready":
                needed.append((t.schema, t.name))
        self.streamed.remember(members, self.holds.held)
        for current in self.state.tables():
            if current.status != "ready":
                self.holds.block((current.schema, current.name))
        if needed:
            log(logger, "copy needed", tables=len(needed), hold=format_lsn(position))
            self._submit(tuple(needed), anchor, position)
        elif anchor is not None:
            anchor.close()

    def _no_longer_streamed(self, table: TableState) -> None:
        """A table the stream no longer sends (left out of the publication or by
        `STREAMBED_INCLUDE_TABLES` / `STREAMBED_EXCLUDE_TABLES`, or dropped) is forgotten
        before the stream starts: its changes from now on are acknowledged unread, so if it
        is streamed again it must be copied again, as a new table is. Its lake table keeps
        its files (`streambed.lake.sweep` still removes those no snapshot references), but
        the query server stops serving it (its rows would only grow stale)."""
        self.state.forget(table.schema, table.name)
        self.lake.unload((table.schema, table.name))
        log(
            logger,
            "table no longer streamed (not in the publication, left out by "
            "STREAMBED_INCLUDE_TABLES / STREAMBED_EXCLUDE_TABLES, or dropped): no longer "
            "served, its lake table's files are kept; if it is streamed again, it is copied "
            "again",
            logging.WARNING,
            table=table.qualified,
            status=table.status,
        )

    def hold(self, stream: Any) -> HeldStream:
        return HeldStream(stream, self)

    def blocked(self, schema: str, name: str) -> bool:
        return self.holds.blocked((schema, name))

    def relation(self, rel: Relation, key: TableKey) -> None:
        """The stream names a table (first time in this process): ready tables update their
        relation id; a table never copied is blocked and copied now."""
        name = (rel.namespace, rel.name)
        if self.holds.blocked(name):
            return
        current = self.state.table(*name)
        if current is not None and current.status == "ready":
            self.state.register(rel.namespace, rel.name, rel.relation_id, "ready")
            return
        rows = self._published(name)
        if rows is None:
            # e.g. a partition, whose changes arrive as its root's (publish_via_partition_root):
            # its rows reach the lake through the root's copy and stream.
            self.state.register(rel.namespace, rel.name, rel.relation_id, "ready")
            return
        self.state.register(rel.namespace, rel.name, rel.relation_id, "pending")
        self.state.set_membership(rel.namespace, rel.name, rows)  # as the copy starts
        log(logger, "new table in the stream, copying it", table=f"{name[0]}.{name[1]}")
        self._submit((name,), None, self.holds.position)

    def _published(self, name: Name) -> setup.Membership | None:
        """The table's publication rows, None if the publication does not list it."""
        conn = sql_connect(self.settings.source_url)
        try:
            return setup.memberships(conn, self.settings.publication).get(name)
        finally:
            conn.close()

    def ack_limit(self) -> int | None:
        return self.holds.ack_limit()

    def acked(self, lsn: int) -> None:
        self.holds.acked(lsn)

    def due(self, now: float) -> bool:
        """Something for `step`: a copy finished, a failed copy's pause is over, or it is
        time to look for resync requests."""
        if self.holds.reported() or self.retries.any_due(now):
            return True
        if now >= self._next_resync_poll:
            self._next_resync_poll = now + RESYNC_POLL_SECONDS
            return True
        return False

    def step(self) -> bool:
        """Take finished copies and resync requests; call right after a flush. True when
        a copy committed: restart the stream so the slot re-sends the held changes.

        The copies committed since the last step are recorded together: one watermark, so
        one refresh of the query server's views and one restart of the stream however many
        finished (each is a pass over every table: a first start of hundreds of small
        tables spent most of its time on them, one per copy)."""
        outcomes = self.holds.take()
        refused = [o.error for o in outcomes if o.error and o.error.kind is Kind.STORAGE_AUTH]
        if refused:
            self.holds.give_back(outcomes)
            raise refused[0]  # the lake cannot be written: the process stops
        committed = [o for o in outcomes if o.error is None and not o.gone]
        if committed:
            try:
                if reached("copy_taken_storage_error"):
                    raise StorageError("failpoint copy_taken_storage_error: storage is down")
                self.lake.load([o.name for o in committed])
                self._record_watermark(max(o.frontier or 0 for o in committed))
            except BaseException:
                # Storage failed (the pipeline retries and reads the stream again): every
                # outcome is taken again at the next step. Nothing of them is taken yet, so
                # each copy's hold still keeps the slot from being acknowledged past the
                # changes its blocked table dropped.
                self.holds.give_back(outcomes)
                raise
        again: list[Name] = []  # resync requested while their copy ran: it has ended now
        for outcome in outcomes:
            self._take(outcome, again)
        for outcome in committed:
            self.holds.unblock(outcome.name)
        now = time.monotonic()
        retries = self._due_again(now)  # logged there
        changed = self.streamed.changes(now, self.holds.held)  # logged there
        requested = again + retries + changed
        for table in self.streamed.only_streamed(self.state.take_resync_requests()):
            if not self.holds.held(table):
                requested.append(table)
            elif table not in self._resync_after:
                # Its copy is running (or waiting for the source): that copy's snapshot may
                # predate whatever the request is for, so the table is copied again after it.
                self._resync_after.add(table)
                log(
                    logger,
                    "resync requested during the table's copy; copying it again when that "
                    "copy ends",
                    table=f"{table[0]}.{table[1]}",
                )
        requested = list(dict.fromkeys(requested))
        if requested:
            for schema, name in requested:
                if self.state.table(schema, name) is None:
                    self.state.register(schema, name, 0, "pending")
            asked = [t for t in requested if t not in retries and t not in changed]
            if asked:
                log(logger, "resync requested", tables=", ".join(f"{s}.{n}" for s, n in asked))
            self._submit(tuple(requested), None, self.holds.position)
        return bool(committed)

    def _take(self, outcome: Outcome, again: list[Name]) -> None:
        """Take one finished copy, recorded if it committed (`step`): release its hold.
        A committed table is unblocked by `step`; a failed one stays blocked and pending,
        copied again at a resync or the next start, or after a pause when Spark or storage
        failed (`CopyRetries`)."""
        self.holds.release(outcome)
        if outcome.name in self._resync_after:
            self._resync_after.discard(outcome.name)
            if not outcome.gone:
                again.append(outcome.name)

    def _due_again(self, now: float) -> list[Name]:
        """Tables whose copy failed in Spark or storage and whose pause is over."""
        due = [n for n in self.retries.due(now) if not self.holds.held(n)]  # resync copies it
        for name in due:
            log(logger, "copying again a table whose copy failed", table=f"{name[0]}.{name[1]}")
        return due

    def stopping(self) -> None:
        """streambed is stopping: copies here stop at their ranges' next batch and no other
        copy starts (safe from signal handlers: it only sets an event; `close` cancels
        Spark's jobs and waits)."""
        if not self._closing.is_set():
            self._closing.set()

    def close(self) -> None:
        """Stop copying, and showing progress. A copy running here stops at its ranges'
        next batch, a Spark copy's job is cancelled, and no other copy starts; each is
        left to the next start, which finds it interrupted (its files are removed and it
        runs again). Waits up to `CLOSE_WAIT_SECONDS` for the copy threads to end, so that
        none is still reading when the process ends."""
        self.stopping()
        self._queue.put(None)
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            self._cancel_spark_copies()
        else:
            # Cancelled again until the thread ends: a job submitted just after a cancel
            # (its copy had checked for the stop just before) is cancelled by the next.
            deadline = time.monotonic() + CLOSE_WAIT_SECONDS
            while thread.is_alive() and time.monotonic() < deadline:
                self._cancel_spark_copies()
                thread.join(min(CANCEL_EVERY_SECONDS, max(0.0, deadline - time.monotonic())))
            if thread.is_alive():
                log(
                    logger,
                    "a copy did not stop in time; stopping without it (the next start "
                    "removes its files and copies the table again)",
                    logging.WARNING,
                    waited=f"{CLOSE_WAIT_SECONDS}s",
                )
        self.progress.close()

    # ---- internals -------------------------------------------------------------------

    def _cancel_spark_copies(self) -> None:
        """Cancel the job group of each Spark copy in progress (a group without a running
        job: nothing happens)."""
        with self._lock:
            running = list(self._spark_copies.items())
        for run_id, spark in running:
            with contextlib.suppress(Exception):  # Spark's JVM may be ending too
                spark.sparkContext.cancelJobGroup(job_group(run_id))

    def _submit(self, names: tuple[Name, ...], anchor: SnapshotAnchor | None, hold: int) -> None:
        self.holds.hold(names, hold)
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="streambed-copy", daemon=True)
            self._thread.start()
        self._queue.put(_Batch(names, anchor))

    def _record_watermark(self, frontier: int) -> None:
        latest = self.state.latest_watermark()
        lsn = max(frontier, latest.lsn if latest is not None else 0)
        every = {qualified(s, n): loc for (s, n), loc in self.lake.metadata_locations().items()}
        self.state.record_watermark(lsn, every)
        if self.on_commit is not None:
            self.on_commit(lsn)

    def _recover(self) -> None:
        for schema, name, run_id, _, seam in self.state.copies():
            if discard_uncommitted(self.catalog, schema, name, run_id, self.fs_options):
                self.state.abandon_copy(schema, name)
                log(logger, "interrupted copy removed", table=f"{schema}.{name}", run=run_id)
                continue
            table = self.catalog.load_table((schema, name))
            self.state.finish_copy(schema, name, seam - 1, table.metadata_location)
            log(logger, "interrupted copy had committed", table=f"{schema}.{name}", run=run_id)

    def _work(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None or self._closing.is_set():
                return
            try:
                self._copy_batch(batch)
            except Exception as e:  # never let the copy thread die silently
                error = copy_error(e)
                logger.exception("copy failed")
                self._finish_all(batch.names, error)
            if not self._pause_for_waiting():
                return

    def _pause_for_waiting(self) -> bool:
        """Tables whose copy failed with the source unreachable are queued again after a backoff.
        False when the manager closed meanwhile."""
        waiting, delay = self.retries.take_waiting()
        if not waiting:
            return True
        log(
            logger,
            "copy waits before trying again",
            tables=", ".join(f"{s}.{n}" for s, n in waiting),
            retry_in=f"{delay:.1f}s",
        )
        if self._closing.wait(delay):
            return False
        self._queue.put(_Batch(tuple(waiting), None))
        return True

    def _copy_batch(self, batch: _Batch) -> None:
        anchor = batch.anchor
        if anchor is not None and reached("kill_start_snapshot"):
            self._terminate(anchor)
        if anchor is not None and not anchor.alive():
            log(
                logger,
                "the snapshot of the new slot expired before the copy began; taking a new one",
                logging.WARNING,
            )
            anchor.close()
            anchor = None
        try:
            anchor = anchor or SnapshotAnchor.from_temporary_slot(self.settings.source_url)
        except StreambedError as e:
            self._finish_all(batch.names, e)
            return
        again: list[Name] = []
        try:
            infos: list[TableInfo] = []
            for schema, name in batch.names:
                try:
                    info = table_info(anchor.conn, schema, name, self.settings.publication)
                    infos.append(self._with_base_types(info))
                except TableGone as e:
                    late = self._created_after_snapshot(schema, name)
                    if late is None:
                        self._gone((schema, name), e)
                    else:
                        infos.append(late)
                except StreambedError as e:
                    self._fail((schema, name), e)
                except psycopg.Error as e:
                    if not (anchor.conn.broken or anchor.conn.closed):
                        raise
                    # The anchor's connection broke: its snapshot is gone.
                    self._copy_again((schema, name), _anchor_lost(f"{schema}.{name}", e), again)
            if reached("expire_copy_snapshot"):
                log(logger, "failpoint expire_copy_snapshot: ending the copy's snapshot")
                anchor.close()
            with ThreadPoolExecutor(max_workers=self.max_parallel) as pool:
                for info in infos:
                    pool.submit(self._copy_one, info, anchor, again)
        finally:
            detach_all()  # the copy threads' kept source connections (in-process copies)
            anchor.close()
        if again:  # copied again under a new snapshot; their holds stay
            self._queue.put(_Batch(tuple(again), None))

    def _terminate(self, anchor: SnapshotAnchor) -> None:
        """Failpoint `kill_start_snapshot`: the source ends the first start's snapshot
        transaction (`pg_terminate_backend`), as an operator or a timeout would."""
        log(logger, "failpoint kill_start_snapshot: terminating the snapshot's session")
        with sql_connect(self.settings.source_url) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (anchor.conn.info.backend_pid,))

    def _with_base_types(self, info: TableInfo) -> TableInfo:
        if self.base_types is None:
            return info
        bases = self.base_types([c.type_oid for c in info.relation.columns])  # domains
        return replace(info, relation=with_base_types(info.relation, bases))

    def _created_after_snapshot(self, schema: str, name: str) -> TableInfo | None:
        """A table the copy's snapshot does not see but the source has now was created after
        the snapshot: every row it has came after the seam and is in the stream, so its copy
        is empty. None when the table does not exist now either."""
        conn = sql_connect(self.settings.source_url)
        try:
            info = table_info(conn, schema, name, self.settings.publication)
        except TableGone:
            return None
        finally:
            conn.close()
        log(
            logger,
            "table created after the copy's snapshot: its rows come from the stream",
            table=info.qualified,
        )
        return replace(self._with_base_types(info), blocks=0, estimated_rows=0)

    def _gone(self, name: Name, error: StreambedError) -> None:
        """The table was dropped: forget it, so it holds nothing back; if a table of that
        name appears again, its Relation message makes it new."""
        self.state.forget(*name)
        log(
            logger,
            "table no longer exists in the source; forgotten",
            logging.WARNING,
            table=f"{name[0]}.{name[1]}",
        )
        self.holds.report(Outcome(name, error=error, gone=True))

    def _copy_one(self, info: TableInfo, anchor: SnapshotAnchor, again: list[Name]) -> None:
        name = (info.schema, info.name)
        run_id = uuid.uuid4().hex[:12]
        if self._closing.is_set():  # stays pending: the next start copies it
            return
        try:
            with self._catalog_lock:  # the embedded catalog does not take concurrent DDL
                table = lake_table(self.catalog, info)
            self.state.begin_copy(
                info.schema,
                info.name,
                info.relation.relation_id,
                run_id,
                output_dir(table, run_id),
                anchor.seam,
            )
            self.progress.start(info.qualified, run_id, info.estimated_rows)
            log(logger, "copy started", table=info.qualified, seam=format_lsn(anchor.seam))
            # Spark only for a table that needs it: empty and small tables are copied
            # without it, meanwhile a first start's Spark is still starting.
            local = self.settings.copy_local_bytes
            spark = None if info.blocks == 0 or copies_here(info, local) else self._spark()
            if spark is not None:
                with self._lock:
                    # Cancelled by `close`; a copy closed before its job (while Spark was
                    # starting, say) does not submit it (`job._copy_on_spark`).
                    self._spark_copies[run_id] = spark
            result = copy_table(
                spark,
                table,
                info,
                url=self.settings.source_url,
                snapshot=anchor.snapshot_name,
                frontier=anchor.frontier,
                run_id=run_id,
                fs_options=self.fs_options,
                reader=self.settings.copy_reader,
                local_bytes=local,
                local_threads=range_threads(self.settings.spark_master),
                closing=self._closing,
            )
        except Exception as e:
            if self._closing.is_set():
                self._stopped(info, run_id)
                return
            error = copy_error(e)
            try:
                discard_uncommitted(self.catalog, info.schema, info.name, run_id, self.fs_options)
            except (OSError, StreambedError) as cleanup:  # storage down: the sweep removes them
                log(
                    logger,
                    "cannot remove the failed copy's files now; `streambed sweep` will",
                    logging.WARNING,
                    table=info.qualified,
                    error=" ".join(str(cleanup).split()),
                )
            self.progress.finish(info.qualified, None, failed=True)
            if isinstance(error, SnapshotExpired | CopyInterrupted):
                self._copy_again(name, error, again)
            else:
                self._fail(name, error)
            return
        finally:
            with self._lock:
                self._spark_copies.pop(run_id, None)
        self.retries.committed(name)
        self.state.finish_copy(info.schema, info.name, result.frontier, result.metadata_location)
        self.progress.finish(info.qualified, result.rows, copying=result.copying_seconds)
        log(
            logger,
            "copy committed",
            table=info.qualified,
            rows=result.rows,
            files=result.files,
            bytes=result.bytes,
            seconds=f"{result.seconds:.1f}",
            frontier=format_lsn(result.frontier),
        )
        self.holds.report(Outcome(name, frontier=result.frontier))

    def _stopped(self, info: TableInfo, run_id: str) -> None:
        """The copy ended because streambed is stopping: its table stays as it is in the
        state store (copying), and the next start removes its files and copies it again."""
        with contextlib.suppress(OSError, StreambedError):  # the next start removes them
            discard_uncommitted(self.catalog, info.schema, info.name, run_id, self.fs_options)
        log(
            logger,
            "copy stopped: streambed is stopping; the next start copies the table again",
            table=info.qualified,
        )

    def _copy_again(
        self, name: Name, error: SnapshotExpired | CopyInterrupted, retry: list[Name]
    ) -> None:
        """The copy's snapshot expired, or a task lost its connection: add `name` to `retry`
        (copied again under a new snapshot) unless it has had `SNAPSHOT_ATTEMPTS` snapshots;
        then it fails."""
        qualified = f"{name[0]}.{name[1]}"
        lost = isinstance(error, CopyInterrupted)
        taken = self.retries.snapshot_lost(name, SNAPSHOT_ATTEMPTS)
        if taken >= SNAPSHOT_ATTEMPTS:
            what = (
                f"The copy was interrupted {taken} times; check what ends the `streambed-copy` "
                "connections (pg_terminate_backend, statement_timeout for the role, a "
                "connection pooler or proxy timeout)"
                if lost
                else f"The copy's snapshot expired {taken} times; check what ends the "
                "`streambed-copy anchor` connection (pg_terminate_backend, a connection "
                "pooler or proxy timeout)"
            )
            self._fail(
                name,
                SourceError(
                    f"{error}. {what}, then run `streambed resync {qualified}`",
                    kind=Kind.SOURCE_SETUP,
                ),
            )
            return
        if self.state.table(*name) is not None:
            self.state.abandon_copy(*name)
        log(
            logger,
            "a copy task lost its connection to the source; copying the table again under "
            "a new snapshot"
            if lost
            else "the copy's snapshot expired before its tasks imported it; copying the "
            "table again under a new snapshot",
            logging.WARNING,
            table=qualified,
            attempt=f"{taken + 1} of {SNAPSHOT_ATTEMPTS}",
            error=str(error),
        )
        with self._lock:
            retry.append(name)

    def _fail(self, name: Name, error: StreambedError) -> None:
        if self.state.table(*name) is not None:
            self.state.abandon_copy(*name)
        if error.kind is Kind.SOURCE_UNREACHABLE:  # it keeps its hold; `_work` queues it again
            log(
                logger,
                "copy failed: the source is unreachable; copying the table again when it answers",
                logging.WARNING,
                table=f"{name[0]}.{name[1]}",
                error=str(error),
            )
            self.retries.unreachable(name)
            return
        if error.kind is Kind.STORAGE:  # released and blocked until copied again
            failures, delay = self.retries.storage_failed(name, time.monotonic())
            self.holds.report(Outcome(name, error=error))
            log(
                logger,
                "copy failed in Spark or storage; the table stays pending and is copied "
                "again after a pause",
                logging.ERROR,
                table=f"{name[0]}.{name[1]}",
                error=str(error),
                failures=failures,
                retry_in=f"{delay:.1f}s",
            )
            return
        log(
            logger,
            "copy failed: the lake's storage refused streambed; stopping"  # `step` raises it
            if error.kind is Kind.STORAGE_AUTH
            else "copy failed; the table stays pending (retried at the next start or by "
            "`streambed resync`)",
            logging.ERROR,
            table=f"{name[0]}.{name[1]}",
            error=str(error),
        )
        self.holds.report(Outcome(name, error=error))

    def _finish_all(self, names: tuple[Name, ...], error: StreambedError) -> None:
        for name in names:
            self._fail(name, error)


def copy_streamed_again(state: StateStore, slot: str, replaced_lost: bool) -> None:
    """Before the slot is created while tables are `ready`: the lake holds what an earlier
    slot streamed, up to each table's frontier, and the changes after those frontiers are
    in no slot (the old one was dropped, invalidated, or is not on the server the source
    failed over to). Every such table goes back to `pending`, so it is copied again under
    the new slot's snapshot; done before the slot exists, so that a crash in between
    cannot leave them `ready` beside a slot that no longer looks new."""
    streamed = [t for t in state.tables() if t.status == "ready"]
    if not streamed:
        return
    frontiers = [t.frontier_lsn for t in streamed if t.frontier_lsn is not None]
    log(
        logger,
        "the replication slot is new, but the lake holds tables streamed from an earlier "
        "one: the changes in between are lost to the stream, so every table is copied again",
        logging.WARNING,
        slot=slot,
        why="the source invalidated the earlier slot"
        if replaced_lost
        else "the earlier slot was dropped, or the source failed over to a server without it",
        tables=len(streamed),
        lake_frontier=format_lsn(max(frontiers)) if frontiers else "none",
    )
    for t in streamed:
        state.register(t.schema, t.name, t.relation_id, "pending")


def copy_error(error: Exception) -> StreambedError:
    """What a copy failed with, as a StreambedError: the lake's OSErrors are storage
    failures (`storage.storage_error`), and Spark's own errors outside the job (its JVM
    ended: `spark_session` starts another) are failures in Spark; both are copied again
    after a pause."""
    if isinstance(error, StreambedError):
        return error
    failed = storage_error(error, "the lake's storage failed")
    if failed is not None:
        return failed
    text = " ".join(str(error).split())
    if raised_by_spark(error):  # e.g. Spark's JVM ended
        return StreambedError(f"Spark failed: {text}", kind=Kind.STORAGE)
    return StreambedError(text)


def _anchor_lost(qualified: str, error: psycopg.Error) -> SnapshotExpired:
    return SnapshotExpired(
        f"copy of {qualified} failed: the connection holding its snapshot was lost "
        f"({' '.join(str(error).split())})",
        kind=Kind.SOURCE_SETUP,
    )
