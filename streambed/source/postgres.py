"""The source database as the pipeline sees it: setup, table keys, the stream, heartbeats."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg

from streambed.buffer.changes import TableKey, lake_key
from streambed.core.config import Settings
from streambed.core.errors import Kind, SourceError
from streambed.core.failpoints import failpoint
from streambed.pgoutput.messages import Relation
from streambed.source import setup
from streambed.source.connection import ReplicationConnection, sql_connect
from streambed.source.heartbeat import Heartbeat
from streambed.source.setup import SlotHealth
from streambed.source.slot_watch import CHECK_SECONDS, SlotWatch
from streambed.source.snapshot import SnapshotAnchor
from streambed.source.stream import ReplicationStream

logger = logging.getLogger("streambed.source")


class PostgresSource:
    """Implements `streambed.pipeline.Source` on a real Postgres."""

    def __init__(
        self,
        settings: Settings,
        *,
        export_snapshot: bool = False,
        on_slot_health: Callable[[SlotHealth | None], None] | None = None,
        before_new_slot: Callable[[bool], None] | None = None,
    ) -> None:
        """`on_slot_health`: each reading of the slot (`SlotWatch`), for the metrics.
        `before_new_slot(replaced_lost)`: called before the slot is created (not when it
        exists), e.g. to copy again the tables an earlier slot streamed."""
        self.settings = settings
        self.export_snapshot = export_snapshot
        # The snapshot of the slot when `prepare` created it (export_snapshot): the initial
        # copy runs under it; the copier takes it (and sets this back to None).
        self.initial_snapshot: SnapshotAnchor | None = None
        # Called before the slot is created, with whether it replaces an invalidated one
        # (`streambed.commands.run`: tables streamed from an earlier slot are to be copied again).
        self.before_new_slot = before_new_slot
        self._conn: psycopg.Connection[Any] | None = None
        self._heartbeat = Heartbeat(settings.source_url, settings.heartbeat_interval)
        self._slot_watch = SlotWatch(
            settings.source_url,
            settings.slot,
            every=settings.heartbeat_interval or CHECK_SECONDS,
            on_health=on_slot_health,
        )

    def prepare(self) -> None:
        """Check the source, then create the publication and slot when they are missing."""
        conn = self._sql()
        setup.check_source(conn)
        setup.ensure_publication(conn, self.settings.publication)
        url = self.settings.source_url
        with ReplicationConnection.connect(url) as replication:
            slot = setup.ensure_slot(
                conn,
                replication,
                self.settings.slot,
                export_snapshot=self.export_snapshot,
                before_create=self.before_new_slot,
            )
            if slot.created:
                failpoint("after_slot_created")  # the crash test: before anything else runs
            if slot.snapshot_name is not None and slot.consistent_point is not None:
                # Imported before the replication connection runs another command (or
                # closes), which would end the exported snapshot.
                try:
                    self.initial_snapshot = SnapshotAnchor.adopt(
                        url, slot.snapshot_name, slot.consistent_point
                    )
                except SourceError as e:
                    logger.warning(
                        "cannot import the new slot's snapshot; tables are copied under a "
                        "temporary slot's snapshot instead",
                        extra={"fields": {"error": str(e)}},
                    )

    def open_stream(self) -> ReplicationStream:
        return ReplicationStream.start(
            self.settings.source_url,
            self.settings.slot,
            self.settings.publication,
            status_interval=self.settings.status_interval,
        )

    def table_key(self, relation: Relation) -> TableKey:
        """How rows of `relation` are identified in the lake (`buffer.changes.lake_key`)."""
        return lake_key(relation, lambda: self._primary_key(relation.relation_id))

    def _primary_key(self, relation_id: int) -> tuple[str, ...]:
        try:
            return setup.table_key(self._sql(), relation_id).primary_key
        except SourceError as e:
            if e.kind is not Kind.SOURCE_UNREACHABLE:
                raise
            self._drop()
            return setup.table_key(self._sql(), relation_id).primary_key

    def beat(self, now: float) -> None:
        self._heartbeat.maybe_beat(now)
        self._slot_watch.start()  # once: the slot exists by the first beat

    def close(self) -> None:
        self._heartbeat.close()
        self._slot_watch.close()
        self._drop()

    def _sql(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = sql_connect(self.settings.source_url)
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
