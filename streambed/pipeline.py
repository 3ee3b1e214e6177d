"""The single loop: read WAL, decode, buffer, flush, acknowledge.

The I/O parts come in as arguments (`Source`, `Sink`, `StateStore`); this module only
orchestrates. The order that makes delivery exactly-once is written down here, once,
in `Pipeline.flush`:

    1. write Parquet files        (sink.apply, per table)
    2. commit Iceberg             (sink.apply: one snapshot per table, frontier in its summary)
    3. record state in SQLite     (per-table frontier + the watermark)
    4. acknowledge the slot       (stream.ack(commit end LSN))

A crash between any two steps replays from the slot's confirmed LSN; changes whose commit
LSN is at or below a table's frontier are skipped by the buffer, so nothing is applied
twice, and nothing is acknowledged before it is durable in Iceberg.

Pacing. The interval trigger waits at least as long as recent flushes took
(`streambed.buffer.pacing`): flushes that cost more than the interval (a merge that rewrites
a table's files) would otherwise leave the loop almost no time to read, and the stream
would fall behind. The copier's polls wait for the same interval, so they do not force the
flushes the pacing avoids.

Catching up. The interval trigger exists for freshness; while the stream is far behind (the
last commit read is older than `CATCH_UP_LAG` seconds, than `flush_interval` and than a few
paced cycles of interval plus flush, e.g. after downtime or a bulk load) a flush on the
interval only pays a full merge for a few changes and makes the backlog grow. The lag must
be large: a steady stream whose merges take a few seconds is always a few flushes behind,
and stretching its interval would only make it staler. Then the interval is stretched to
`CATCH_UP_INTERVAL_FACTOR` times its setting, until a commit read is recent again or the
stream has nothing more to send; the rows and bytes triggers still bound memory. pgoutput
carries no "WAL end of the server" (in logical replication the XLogData wal_end is the
message's own LSN and a keepalive's is what the walsender has sent), so the age of the
commits read is the measure of being behind. A source clock far behind this machine's makes
every commit look old; the stretched interval still bounds how long changes wait.

A storage failure (`Kind.STORAGE`: the object store or the warehouse failed during a flush)
is retried as the source's outages are (`streambed.core.retry`, forever): everything
buffered is dropped and the stream is opened again from the slot's confirmed position, as a
restart would. Nothing past the last flush was acknowledged, so the slot sends it again;
before streaming again `recover` lets the lake side reload its tables and the state store
catch up with Iceberg (a commit whose answer was lost may have landed). A store that refuses
the credentials or the access (`Kind.STORAGE_AUTH`) is not retried: the process stops.

Tables that are being copied (`Copier`, `streambed.copy.manager`) read as blocked: their
changes are dropped, the stream is acknowledged no further than where they were first
dropped, and when a copy commits the stream is restarted so the slot sends them again.

An `observer` (`Observer`, optional: `streambed.metrics.replication`) hears of each commit
read, each flush and its changes, an idle stream, and whether the stream is open and why
not; it only records, on the loop's thread.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from streambed.buffer import ChangeBuffer
from streambed.buffer.pacing import FlushPacer
from streambed.core.config import Settings
from streambed.core.errors import Kind, SourceError, StreambedError
from streambed.core.failpoints import failpoint
from streambed.core.log import log
from streambed.core.lsn import format_lsn
from streambed.core.names import qualified, table_selected
from streambed.core.retry import RetryPolicy, Work
from streambed.pgoutput import messages as m
from streambed.pgoutput.decoder import Decoder
from streambed.ports import Copier, Observer, Sink, Source, State, Stream
from streambed.source.heartbeat import HEARTBEAT_PREFIX
from streambed.source.stream import pg_now

logger = logging.getLogger("streambed.pipeline")

CATCH_UP_INTERVAL_FACTOR = 30
"""While the stream is behind, the interval trigger waits this many flush intervals."""

CATCH_UP_LAG = 30.0
"""Seconds a commit must be old when read for the stream to count as behind."""

LOOP_WAIT = 0.5
"""The longest the loop waits on the socket with nothing due: how soon it sees a stop, a
finished copy, a heartbeat or a status update that is due."""


BLOCKED = (1 << 64) - 1  # the frontier of a table being copied: all its changes are dropped


@dataclass
class FlushStats:
    flushes: int = 0
    rows: int = 0
    last_seconds: float = 0.0
    last_lsn: int = 0


@dataclass
class Pipeline:
    settings: Settings
    source: Source
    sink: Sink
    state: State
    on_commit: Callable[[int], None] | None = None
    stats: FlushStats = field(default_factory=FlushStats)
    copier: Copier | None = None
    recover: Callable[[], None] | None = None
    """After a storage failure, before streaming again (`streambed.commands.run`: the sink forgets
    its cached tables and the state store is reconciled with Iceberg)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    observer: Observer | None = None

    def __post_init__(self) -> None:
        self._stop = False
        self._frontiers: dict[tuple[str, str], int | None] = {}
        self._registered: set[tuple[str, str]] = set()
        self._buffer = self._new_buffer()
        self._last_flush = time.monotonic()
        self._behind = False  # catching up: see "Catching up" in the module doc
        self._pacer = FlushPacer(self.settings.flush_interval)  # see "Pacing"
        self._storage_failures = 0  # consecutive
        self._recovering = False  # a storage failure: `recover` before streaming again
        # The LSN of a heartbeat read: the idle acknowledgement reaching it is reported at
        # once, not at the status interval (`streambed verify` writes one to wait less).
        self._report_at: int | None = None

    # ---- control --------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to flush what is committed and return, and the copies to stop (safe
        from signal handlers)."""
        self._stop = True
        if self.copier is not None:
            self.copier.stopping()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            log(logger, "stopping", signal=signal.Signals(signum).name.lower())
            self.stop()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def run(self, *, until: Callable[[], bool] | None = None) -> None:
        """Stream until stopped; reconnect with backoff when the source goes away, and
        read again from the slot when storage fails (see the module doc)."""
        failures = 0  # consecutive failures to open the stream
        prepared = False
        while not self._stop:
            pause = 0.0
            try:
                if self._recovering and self.recover is not None:
                    self.recover()
                self._recovering = False
                if not prepared:
                    self.source.prepare()
                    if self.copier is not None:
                        self.copier.start(self.source)
                    prepared = True
                stream = self.source.open_stream()
                if self.copier is not None:
                    stream = self.copier.hold(stream)
            except SourceError as e:
                decision = self.retry.decide(e, failures, Work.STREAM)
                if not decision.retry:
                    raise
                self._report(f"the source is not ready, retrying: {e}")
                failures += 1
                delay = decision.delay
                log(
                    logger,
                    "source not ready, retrying",
                    logging.WARNING,
                    error=str(e),
                    retry_in=f"{delay:.1f}s",
                )
                self._sleep(delay)
                continue
            except StreambedError as e:
                self._sleep(self._storage_failed(e))
                continue
            failures = 0
            self._report(None)
            try:
                if not self._stream(stream, until):
                    self._report("replication stopped")
                    return
                self._read_again()  # a copy committed (see the module doc)
            except SourceError as e:
                if not self.retry.retries(e.kind):
                    raise
                log(logger, "replication connection lost", logging.WARNING, error=str(e))
                self._report(f"the replication connection was lost, reconnecting: {e}")
                # Committed changes are durable once flushed; everything not yet committed
                # will be sent again from the slot's confirmed position.
                try:
                    self._flush_while_disconnected()
                    self._buffer.discard_uncommitted()
                except StreambedError as failed:
                    pause = self._storage_failed(failed)
            except StreambedError as e:
                pause = self._storage_failed(e)
            finally:
                stream.close()
            self._sleep(pause)

    def _storage_failed(self, error: StreambedError) -> float:
        """A storage failure: drop what is buffered (the slot sends it again) and return
        how long to wait before streaming again. Any other error is raised again."""
        if error.kind is not Kind.STORAGE:
            raise error
        self._read_again()
        self._recovering = True
        self._report(f"storage failed, retrying: {error}")
        if self._stop:
            log(
                logger,
                "stopping with changes not in the lake: storage failed; the slot sends them "
                "again at the next start",
                logging.WARNING,
                error=str(error),
            )
            return 0.0
        delay = self.retry.delay(error.kind, self._storage_failures, Work.STREAM)
        self._storage_failures += 1
        log(
            logger,
            "storage failed, retrying",
            logging.WARNING,
            error=str(error),
            attempt=self._storage_failures,
            retry_in=f"{delay:.1f}s",
        )
        return delay

    def _read_again(self) -> None:
        """Forget what is buffered and the frontiers looked up: the next stream reads again
        from the slot's confirmed position."""
        self._buffer = self._new_buffer()
        self._frontiers.clear()
        if self.observer is not None:
            self.observer.dropped()

    def _flush_while_disconnected(self) -> None:
        """Flush what is committed; if that needs the (unreachable) source, keep it buffered:
        the buffer skips the transactions the slot sends again."""
        try:
            self.flush(None)
        except SourceError as e:
            if e.kind is not Kind.SOURCE_UNREACHABLE:
                raise
            log(logger, "flush deferred until the source is back", logging.WARNING, error=str(e))

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop and time.monotonic() < deadline:
            time.sleep(min(0.2, deadline - time.monotonic()))

    # ---- the loop -------------------------------------------------------------------

    def _stream(self, stream: Stream, until: Callable[[], bool] | None) -> bool:
        """Stream until stopped (False) or until a copy committed (True: restart)."""
        copier = self.copier
        decoder = Decoder()
        decode, insert_row = decoder.decode, decoder.insert_row
        settings = self.settings
        buffer = self._buffer
        wanted = self._wanted
        insert, update, delete = buffer.insert, buffer.update, buffer.delete
        stage_row = buffer.insert_row
        while not self._stop and not (until is not None and until()):
            # Wait on the socket until data comes or the buffered changes are due, at most
            # LOOP_WAIT: an idle stream sleeps in poll(), it does not spin.
            due = buffer.flush_due(self._interval())
            wait = LOOP_WAIT if due is None else min(LOOP_WAIT, due - time.monotonic())
            batch = stream.read_batch(max(0.0, wait))
            for payload in batch.payloads:
                # Inserts outside streamed blocks, most of a busy stream, skip the message
                # object; everything else is decoded into one.
                row = insert_row(payload)
                if row is not None:
                    if row[0] in wanted:
                        stage_row(*row)
                    continue
                msg = decode(payload)
                kind = type(msg)
                # The three row messages are most of the stream: handle them inline.
                if kind is m.Insert:
                    if msg.relation_id in wanted:  # type: ignore[union-attr]
                        insert(msg)  # type: ignore[arg-type]
                elif kind is m.Update:
                    if msg.relation_id in wanted:  # type: ignore[union-attr]
                        update(msg)  # type: ignore[arg-type]
                elif kind is m.Delete:
                    if msg.relation_id in wanted:  # type: ignore[union-attr]
                        delete(msg)  # type: ignore[arg-type]
                else:
                    self._dispatch(msg, stream)
            if batch.keepalive_end and self._idle():
                # Nothing buffered or open: every change before that WAL end is durable or
                # was not for us, so the slot may move on (and release the WAL it pins).
                stream.ack(batch.keepalive_end)
                if self._report_at is not None and batch.keepalive_end >= self._report_at:
                    stream.send_status(force=True)
                    self._report_at = None
                if self.observer is not None:
                    self.observer.idle()
            if not batch.payloads and self._behind:
                self._caught_up()  # the source has nothing more to send right now
            now = time.monotonic()
            interval = self._interval()
            flushed = buffer.should_flush(now, settings.flush_rows, settings.flush_bytes, interval)
            if flushed:
                self.flush(stream)
            # The copier is looked at after a flush (its step may restart the stream): after
            # a flush that was due anyway, with nothing buffered, or once per interval (paced
            # or stretched): its poll every few seconds would otherwise force the small
            # flushes the interval avoids.
            polled = flushed or not buffer.dirty or now - self._last_flush >= interval
            if copier is not None and polled and copier.due(now):
                self.flush(stream)
                if copier.step():
                    stream.send_status(force=True)
                    return True
            self.source.beat(now)
            stream.send_status()
        self.flush(stream)
        stream.send_status(force=True)
        return False

    def _interval(self) -> float:
        """The interval trigger's wait: paced by the flushes' cost, stretched while behind."""
        return self._pacer.interval(self._behind, CATCH_UP_INTERVAL_FACTOR)

    def _report(self, not_streaming: str | None) -> None:
        if self.observer is not None:
            self.observer.streaming(not_streaming)

    def _idle(self) -> bool:
        b = self._buffer
        return not b.dirty and not b.in_transaction and b.staged_streams == 0

    def _dispatch(self, msg: m.Message, stream: Stream) -> None:
        """Every message but Insert/Update/Delete, which `_stream` handles inline."""
        b = self._buffer
        kind = type(msg)
        if kind is m.Begin:
            assert isinstance(msg, m.Begin)
            b.begin(msg.xid)
        elif kind is m.Commit:
            assert isinstance(msg, m.Commit)
            b.commit(msg.commit_lsn, msg.end_lsn)
            self._commit_age(msg.commit_ts)
            if self.observer is not None:
                self.observer.commit_read(msg.commit_ts, buffered=b.dirty)
        elif kind is m.Relation:
            assert isinstance(msg, m.Relation)
            self._relation(msg, stream)
        elif kind is m.Truncate:
            assert isinstance(msg, m.Truncate)
            wanted = tuple(r for r in msg.relation_ids if r in self._wanted)
            if wanted:
                b.truncate(m.Truncate(msg.options, wanted, msg.xid))
        elif kind is m.StreamStart:
            assert isinstance(msg, m.StreamStart)
            b.stream_start(msg.xid)
        elif kind is m.StreamStop:
            b.stream_stop()
        elif kind is m.StreamCommit:
            assert isinstance(msg, m.StreamCommit)
            b.stream_commit(msg.xid, msg.commit_lsn, msg.end_lsn)
            self._commit_age(msg.commit_ts)
            if self.observer is not None:
                self.observer.commit_read(msg.commit_ts, buffered=b.dirty)
        elif kind is m.StreamAbort:
            assert isinstance(msg, m.StreamAbort)
            b.stream_abort(msg.xid, msg.subxid)
        elif kind is m.LogicalMessage:
            assert isinstance(msg, m.LogicalMessage)
            if msg.prefix == HEARTBEAT_PREFIX:
                self._report_at = msg.lsn
        # Origin, Type and logical messages carry nothing to apply.

    def _commit_age(self, commit_ts: int) -> None:
        """Behind when the commit just read is older than `CATCH_UP_LAG`, the interval and a
        few paced cycles (`FlushPacer.behind_after`)."""
        lag = (pg_now() - commit_ts) / 1e6
        if lag > self._pacer.behind_after(CATCH_UP_LAG):
            if not self._behind:
                self._behind = True
                log(logger, "catching up", lag=f"{lag:.1f}s")
        elif self._behind:
            self._caught_up()

    def _caught_up(self) -> None:
        self._behind = False
        log(logger, "caught up")

    def _relation(self, rel: m.Relation, stream: Stream) -> None:
        s = self.settings
        if not table_selected(rel.namespace, rel.name, s.include_tables, s.exclude_tables):
            self._wanted.discard(rel.relation_id)
            return
        key = self.source.table_key(rel)
        if self._buffer.needs_flush_before(rel, key):
            self.flush(stream)
        self._buffer.relation(rel, key)
        self._wanted.add(rel.relation_id)
        name = (rel.namespace, rel.name)
        if name not in self._registered:
            if self.copier is None:
                self.state.register(rel.namespace, rel.name, rel.relation_id, "ready")
            else:
                self.copier.relation(rel, key)
            self._registered.add(name)

    # ---- flush: the one place where the delivery order is decided ---------------------

    def flush(self, stream: Stream | None) -> None:
        started = time.monotonic()
        if not self._buffer.dirty:
            self._last_flush = started
            return
        end_lsn = self._buffer.last_end_lsn
        commit_lsn = self._buffer.last_commit_lsn
        deltas = self._buffer.drain()  # may be empty: changes that cancelled out
        changes = self._buffer.take_changes()
        assert commit_lsn is not None
        locations: dict[tuple[str, str], str] = {}
        rows = 0
        for delta in deltas:  # 1 + 2: write Parquet, commit Iceberg with the frontier
            locations[(delta.schema_name, delta.table_name)] = self.sink.apply(delta)
            self._frontiers[(delta.schema_name, delta.table_name)] = commit_lsn
            rows += len(delta.rows) + len(delta.removed_keys)
        failpoint("after_commit_before_state")
        for (schema, name), location in locations.items():  # 3: state
            self.state.set_frontier(schema, name, commit_lsn, location)
        if deltas:
            every = {qualified(s, n): loc for (s, n), loc in self.sink.metadata_locations().items()}
            self.state.record_watermark(self._watermark_lsn(commit_lsn), every)
        failpoint("after_state_before_ack")
        if stream is not None and end_lsn is not None:  # 4: acknowledge
            stream.ack(end_lsn)
            stream.send_status(force=True)
        self._last_flush = time.monotonic()  # the copier's poll counts from a flush's end
        seconds = self._last_flush - started
        self._pacer.record(seconds)
        if self._storage_failures:
            log(logger, "storage is back", failures=self._storage_failures)
            self._storage_failures = 0
        self.stats.flushes += 1
        self.stats.rows += rows
        self.stats.last_seconds = seconds
        self.stats.last_lsn = commit_lsn
        if self.observer is not None:
            self.observer.flushed(seconds, changes)
        log(
            logger,
            "flushed",
            tables=len(deltas),
            changes=rows,
            lsn=format_lsn(commit_lsn),
            seconds=f"{seconds:.3f}",
            interval=f"{self._interval():.1f}",
        )
        if self.on_commit is not None:
            self.on_commit(commit_lsn)

    # ---- helpers --------------------------------------------------------------------

    def _new_buffer(self) -> ChangeBuffer:
        self._wanted: set[int] = set()
        return ChangeBuffer(
            self.settings.spill_dir,
            self.settings.txn_memory_bytes,
            self._frontier,
            self.sink.stage,
            count_changes=self.observer is not None,
        )

    def _watermark_lsn(self, commit_lsn: int) -> int:
        """Watermarks only move forward. After a copy the stream re-reads from an earlier
        position (see the module doc), so a flush may commit below the last watermark; the
        lake then holds at least what that watermark promised, at the watermark's LSN."""
        mark = self.state.latest_watermark()
        return commit_lsn if mark is None else max(commit_lsn, mark.lsn)

    def _frontier(self, schema: str, name: str) -> int | None:
        if self.copier is not None and self.copier.blocked(schema, name):
            return BLOCKED
        key = (schema, name)
        if key not in self._frontiers:
            self._frontiers[key] = self.sink.frontier(schema, name)
        return self._frontiers[key]
