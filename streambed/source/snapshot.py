"""Snapshots to copy under, and their seams.

A slot created with `SNAPSHOT 'export'` exports a snapshot that is valid only until its
replication connection runs its next command or closes. `SnapshotAnchor.adopt` imports it on
an ordinary SQL connection at once (while the replication connection stays idle) and exports
it again with `pg_export_snapshot()`: the copy workers import the anchor's snapshot, which
lives as long as the anchor's transaction, so the replication connection is free to stream
(or, for a temporary slot, to close and drop the slot) right away.

The seam is the slot's consistent point: the snapshot holds exactly the transactions whose
commit record lies before it, and the stream sends every transaction whose commit record is
at or after it. A copied table is therefore committed with frontier `seam - 1`: the buffer
skips changes with commit LSN <= frontier, i.e. those the copy already holds.

A snapshot *expires* when the anchor's transaction ends before every copy task imported it
(the anchor's connection was closed or terminated, e.g. by an administrator or a network
failure): the tasks that start afterwards fail with `invalid snapshot identifier`. That is
`SnapshotExpired`; the copy manager copies such tables again under a new snapshot, as it
does when a task's own connection is lost mid-read (`CopyInterrupted`). The
anchor turns off `idle_in_transaction_session_timeout` (and `transaction_timeout`, PG 17)
for its own session, since it stays idle in its transaction for the whole copy.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from streambed.core.errors import Kind, SourceError
from streambed.core.log import log
from streambed.core.lsn import format_lsn, parse_lsn
from streambed.source.connection import ReplicationConnection
from streambed.source.copy_session import CONNECT_FAILED, copy_connect

logger = logging.getLogger("streambed.copy")

_EXPIRED_MESSAGES = ("invalid snapshot identifier", "could not import the requested snapshot")
_LOST_MESSAGES = (
    "terminating connection",  # pg_terminate_backend, a server shutting down
    "server closed the connection",
    "could not receive data from server",
    "connection to server was lost",
    "canceling statement due to",  # pg_cancel_backend, statement_timeout, recovery conflict
)


class SnapshotExpired(SourceError):
    """A copy task could not import the copy's snapshot: its transaction had ended."""

    kind = Kind.SOURCE_SETUP


class CopyInterrupted(SourceError):
    """A copy task lost its connection to the source while reading (its backend was
    terminated or its statement cancelled, or the network failed): nothing was committed,
    and the copy manager copies the table again under a new snapshot."""

    kind = Kind.SOURCE_SETUP


def connection_lost(message: str) -> bool:
    """Whether a source error message says a copy task's connection or statement ended."""
    return any(m in message for m in _LOST_MESSAGES)


def connect_failed(message: str) -> bool:
    """Whether a source error message says a copy task could not open its connection
    (libpq's `connection to server at "host", port N failed: ...`)."""
    return CONNECT_FAILED.search(message) is not None


def snapshot_expired(message: str) -> bool:
    """Whether a source error message says a snapshot could not be imported."""
    return any(m in message for m in _EXPIRED_MESSAGES)


@dataclass
class SnapshotAnchor:
    """An open REPEATABLE READ transaction holding a snapshot that copy workers import."""

    conn: psycopg.Connection[Any]
    snapshot_name: str  # what workers pass to SET TRANSACTION SNAPSHOT
    seam: int  # the consistent point of the slot the snapshot came from

    @property
    def frontier(self) -> int:
        """The frontier a table copied under this snapshot gets."""
        return self.seam - 1

    @classmethod
    def adopt(cls, url: str, exported: str, seam: int) -> SnapshotAnchor:
        """Import `exported` now and re-export it. Call before the exporting replication
        connection runs another command."""
        conn = copy_connect(url, "streambed-copy anchor")
        try:
            # The anchor sits idle in its transaction for the whole copy.
            conn.execute("SET idle_in_transaction_session_timeout = 0")
            if conn.info.server_version >= 170000:
                conn.execute("SET transaction_timeout = 0")
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(exported)))
            row = conn.execute("SELECT pg_export_snapshot()").fetchone()
        except psycopg.Error as e:
            conn.close()
            raise SourceError(
                f"cannot import the exported snapshot {exported}: {' '.join(str(e).split())}; "
                "the tables stay pending and are copied at the next start",
                kind=Kind.SOURCE_SETUP,
            ) from e
        assert row is not None
        return cls(conn, str(row[0]), seam)

    @classmethod
    def from_temporary_slot(cls, url: str) -> SnapshotAnchor:
        """A fresh snapshot and seam for tables copied while the main slot streams: a
        TEMPORARY slot with an exported snapshot, adopted, then dropped (the slot goes with
        its connection). Its consistent point is the seam."""
        name = f"streambed_copy_{uuid.uuid4().hex[:12]}"
        with ReplicationConnection.connect(url) as replication:
            res = replication.execute(
                f"CREATE_REPLICATION_SLOT {name} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')",
                f"creating the temporary replication slot {name} for a copy",
            )
            consistent = (res.get_value(0, 1) or b"").decode()
            exported = (res.get_value(0, 2) or b"").decode()
            anchor = cls.adopt(url, exported, parse_lsn(consistent))
        log(logger, "copy snapshot taken", seam=format_lsn(anchor.seam))
        return anchor

    def alive(self) -> bool:
        """Whether the anchor's transaction still holds the snapshot."""
        if self.conn.closed:
            return False
        try:
            self.conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def close(self) -> None:
        """End the anchor transaction (after every worker imported or finished)."""
        with contextlib.suppress(psycopg.Error):
            self.conn.close()
