"""The cut of `streambed verify` and the changes committed after it.

`Cut.take` creates a TEMPORARY logical slot with an exported snapshot (adopted by a
`SnapshotAnchor`, as a copy does), then streams from that slot: the snapshot is the source
at `target = seam - 1`, and the stream sends every transaction committed after it, in commit
order. `read_until(lsn)` collects, for the tables verified, the changes of transactions
committed up to `lsn`: it emits a non-transactional logical message and reads until the
message arrives, so every commit before it has been received. Changes are kept as
`Change`s per table; transactions streamed in progress (protocol 2) are held until their
commit and dropped on abort.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

from streambed.core.errors import Kind, SourceError
from streambed.pgoutput import messages as m
from streambed.pgoutput.decoder import decode
from streambed.source.connection import ReplicationConnection, sql_connect
from streambed.source.snapshot import SnapshotAnchor
from streambed.source.stream import ReplicationStream, XLogData

Name = tuple[str, str]
PREFIX = "streambed_verify"


@dataclass(frozen=True)
class Change:
    """One row change, values by column name (None: NULL, m.UNCHANGED: TOAST unchanged)."""

    commit_lsn: int
    kind: str  # "insert", "update", "delete", "truncate"
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    old_is_key_only: bool = False


@dataclass
class Cut:
    anchor: SnapshotAnchor
    stream: ReplicationStream
    url: str
    tables: set[Name]
    relations: dict[int, m.Relation] = field(default_factory=dict)
    changes: dict[Name, list[Change]] = field(default_factory=dict)
    limits: dict[Name, int] = field(default_factory=dict)  # keep changes up to this LSN
    _open: list[tuple[int | None, Any]] = field(default_factory=list)  # (xid, message)
    _streamed: dict[int, list[tuple[int | None, Any]]] = field(default_factory=dict)
    _stream_xid: int | None = None

    @property
    def target(self) -> int:
        return self.anchor.frontier

    @classmethod
    def take(cls, url: str, publication: str, tables: set[Name]) -> Cut:
        slot = f"streambed_verify_{uuid.uuid4().hex[:12]}"
        replication = ReplicationConnection.connect(url)
        try:
            res = replication.execute(
                f"CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')",
                f"creating the temporary replication slot {slot} for verify",
            )
            seam = (res.get_value(0, 1) or b"").decode()
            exported = (res.get_value(0, 2) or b"").decode()
            from streambed.core.lsn import parse_lsn

            anchor = SnapshotAnchor.adopt(url, exported, parse_lsn(seam))
            try:
                stream = ReplicationStream(replication, slot, publication, anchor.seam)
            except BaseException:
                anchor.close()
                raise
        except BaseException:
            replication.close()
            raise
        return cls(anchor, stream, url, tables)

    def close(self) -> None:
        self.anchor.close()
        with contextlib.suppress(Exception):
            self.stream.close()

    def read_until(self, limits: dict[Name, int], timeout: float) -> None:
        """Collect each table's changes committed after the cut up to its limit."""
        self.limits = limits
        if not limits:
            return
        marker = uuid.uuid4().hex
        try:
            with sql_connect(self.url) as conn:
                conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (PREFIX, marker))
        except (psycopg.Error, SourceError) as e:
            raise SourceError(
                f"verify could not write its marker to the source's WAL "
                f"(pg_logical_emit_message): {' '.join(str(e).split())}",
                kind=Kind.SOURCE_SETUP,
            ) from e
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.stream.read(1.0)
            if not isinstance(message, XLogData):
                continue
            decoded = decode(message.payload, in_stream=self._stream_xid is not None)
            if (
                isinstance(decoded, m.LogicalMessage)
                and decoded.prefix == PREFIX
                and decoded.content == marker.encode()
            ):
                return
            self._handle(decoded)
        raise SourceError(
            f"verify's own replication stream did not reach its marker within {timeout:g} s",
            kind=Kind.SOURCE_SETUP,
        )

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, m.Relation):
            self.relations[msg.relation_id] = msg
        elif isinstance(msg, m.StreamStart):
            self._stream_xid = msg.xid
        elif isinstance(msg, m.StreamStop):
            self._stream_xid = None
        elif isinstance(msg, m.Begin):
            self._open = []
        elif isinstance(msg, m.Commit):
            self._apply(self._open, msg.commit_lsn)
            self._open = []
        elif isinstance(msg, m.StreamCommit):
            self._apply(self._streamed.pop(msg.xid, []), msg.commit_lsn)
        elif isinstance(msg, m.StreamAbort):
            held = self._streamed.pop(msg.xid, [])
            if msg.subxid != msg.xid:
                self._streamed[msg.xid] = [(x, c) for x, c in held if x != msg.subxid]
        elif isinstance(msg, m.Insert | m.Update | m.Delete | m.Truncate):
            if not isinstance(msg, m.Truncate) and self._name(msg.relation_id) is None:
                return  # a table not verified: not kept
            if self._stream_xid is not None:
                self._streamed.setdefault(self._stream_xid, []).append((msg.xid, msg))
            else:
                self._open.append((None, msg))

    def _name(self, relation_id: int) -> Name | None:
        relation = self.relations.get(relation_id)
        if relation is None:
            return None
        name = (relation.namespace, relation.name)
        return name if name in self.limits else None

    def _values(self, relation_id: int, values: m.TupleData | None) -> dict[str, Any] | None:
        if values is None:
            return None
        columns = self.relations[relation_id].columns
        return {c.name: v for c, v in zip(columns, values, strict=False)}

    def _apply(self, held: list[tuple[int | None, Any]], commit_lsn: int) -> None:
        for _xid, msg in held:
            if isinstance(msg, m.Truncate):
                for relation_id in msg.relation_ids:
                    self._add(relation_id, Change(commit_lsn, "truncate", None, None))
                continue
            rid = msg.relation_id
            if isinstance(msg, m.Insert):
                change = Change(commit_lsn, "insert", None, self._values(rid, msg.new))
            elif isinstance(msg, m.Update):
                old = self._values(rid, msg.old)
                change = Change(
                    commit_lsn, "update", old, self._values(rid, msg.new), msg.old_is_key_only
                )
            else:
                old = self._values(rid, msg.old)
                change = Change(commit_lsn, "delete", old, None, msg.old_is_key_only)
            self._add(rid, change)

    def _add(self, relation_id: int, change: Change) -> None:
        name = self._name(relation_id)
        if name is not None and change.commit_lsn <= self.limits[name]:
            self.changes.setdefault(name, []).append(change)

    def columns(self, name: Name) -> list[str] | None:
        """The columns the stream last described for a table (None: no change seen)."""
        for relation in self.relations.values():
            if (relation.namespace, relation.name) == name:
                return [c.name for c in relation.columns]
        return None
