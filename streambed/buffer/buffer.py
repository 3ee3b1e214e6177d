"""`ChangeBuffer`: decoded pgoutput changes in, committed per-table deltas out.

The pipeline calls one method per pgoutput message. Changes are staged per transaction
and enter the per-table buffers only at commit, so a flush never contains part of a
transaction. Streamed transactions (protocol 2) are staged per xid, in memory up to
`txn_memory_bytes` in total and on disk beyond, and dropped on Stream Abort.

Replay is safe: at commit, a table whose lake frontier is at or past the commit LSN gets
nothing from that transaction, and a commit at or before the last commit this buffer
already took (the source re-sent it after a reconnect) is skipped as a whole.

No network I/O; the only files are the spill files in `spill_dir`.

Large transactions. With a `stage` callback, a committed streamed transaction is not
moved into memory whole: while it is replayed from its spill file, every table whose
buffer grows past half of `txn_memory_bytes` hands its collapsed changes over as a part
(`TableDelta(final=False)`) to `stage`, which writes them as data files without committing.
The table's next delta from `drain` is final and commits every part in one snapshot at
its commit LSN, so no reader ever sees part of a transaction. Working sets are fractions
of the bound, so peak memory stays near one `txn_memory_bytes`: staged streams spill
past it, a spill file is read back one segment (1/8 of it) at a time, and a part (1/2)
leaves room for its Arrow conversion. Collapsing per key still
works across parts: a key changed again in a later part was handed over already, so it
is a *removed key* of the later part and the lake side removes it from the files the
earlier parts wrote (a merge of those files). Limits: a part of keyed changes that
touch earlier parts rewrites those files (Spark), so a transaction that updates the same
rows over and over costs one merge per part; the files of parts stay on storage until
commit (orphans if the process dies; `streambed sweep` removes them).

With `count_changes`, the buffer also counts the changes it takes per table and operation
as the source sent them (before they collapse per key), for the metrics: `take_changes`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from streambed.buffer.changes import TableDelta, TableKey
from streambed.buffer.staging import SPILL_SUFFIX, StreamStaging
from streambed.buffer.table import Op, TableBuffer, make_table, qualified, row_bytes
from streambed.core.errors import Kind, SchemaError, StreambedError
from streambed.core.lsn import format_lsn
from streambed.pgoutput.messages import Delete, Insert, Relation, Truncate, TupleData, Update

Frontier = Callable[[str, str], int | None]
"""frontier(schema, table): the LSN already durable in the lake for that table, or None."""

Stage = Callable[[TableDelta], None]
"""stage(part): write a part of a large committed transaction (`TableDelta.final` False)."""

_TRUNCATE_BYTES = 64

OPERATIONS: Final = {tuple: "insert", Update: "update", Delete: "delete", Truncate: "truncate"}
"""The operation each kind of staged change is (`buffer.table.Op`)."""


def _protocol(message: str) -> StreambedError:
    return StreambedError(
        f"replication stream out of order: {message}; this is a bug in streambed or the "
        "source, restart to replay from the last acknowledged position",
        kind=Kind.PROTOCOL,
    )


def _layout(relation: Relation) -> tuple[object, ...]:
    """What must not change under buffered rows (the message's xid does not count)."""
    return (relation.namespace, relation.name, relation.replica_identity, relation.columns)


class ChangeBuffer:
    """Per-table buffers of committed changes, collapsed per key, plus staged transactions.

    Call order (pgoutput): `relation()` before the first change of a table; `begin()`,
    row changes, `commit()` for ordinary transactions; `stream_start()`, row changes,
    `stream_stop()` in blocks, then `stream_commit()` or `stream_abort()` for streamed
    ones. `drain()` hands over every dirty table at the same commit LSN.
    """

    part_check_ops = 4096
    """With `stage`, how many changes are applied between two checks of a table's size."""

    segment_fraction = 8
    """A staged segment (what a spill file is read back in) is this fraction of the bound."""

    part_fraction = 2
    """With `stage`, a table hands a part over at this fraction of the bound."""

    def __init__(
        self,
        spill_dir: Path,
        txn_memory_bytes: int,
        frontier: Frontier,
        stage: Stage | None = None,
        *,
        count_changes: bool = False,
    ) -> None:
        self._stage_part = stage
        self._counts: dict[int, Counter[type]] | None = {} if count_changes else None
        self._spill_dir = spill_dir
        self._txn_memory_bytes = txn_memory_bytes
        self._frontier = frontier
        self._tables: dict[int, TableBuffer] = {}
        self._dirty: dict[int, TableBuffer] = {}
        self._stage: dict[int, list[Op]] | None = None  # the open non-streamed transaction
        self._streams: dict[int, StreamStaging] = {}
        self._stream: StreamStaging | None = None  # between Stream Start and Stream Stop
        self._staged_memory = 0
        self._pending_rows = 0
        self._pending_bytes = 0
        self._last_commit_lsn: int | None = None
        self._last_end_lsn: int | None = None
        self._dirty_since: float | None = None
        spill_dir.mkdir(parents=True, exist_ok=True)
        for stale in spill_dir.glob(f"*{SPILL_SUFFIX}"):
            stale.unlink()  # left by a crashed run; the source re-sends those transactions

    # ---- state the pipeline looks at --------------------------------------------------

    @property
    def pending_rows(self) -> int:
        """Buffered committed entries (rows, deletions), after collapsing."""
        return self._pending_rows

    @property
    def pending_bytes(self) -> int:
        """Approximate memory of the buffered committed changes."""
        return self._pending_bytes

    @property
    def dirty(self) -> bool:
        """Committed changes are buffered since the last drain."""
        return bool(self._dirty)

    @property
    def last_commit_lsn(self) -> int | None:
        return self._last_commit_lsn

    @property
    def last_end_lsn(self) -> int | None:
        """End LSN of the last commit taken: what to acknowledge once drained data is durable."""
        return self._last_end_lsn

    @property
    def in_transaction(self) -> bool:
        """A non-streamed transaction is open (between begin and commit)."""
        return self._stage is not None

    @property
    def in_stream(self) -> bool:
        """Between Stream Start and Stream Stop."""
        return self._stream is not None

    @property
    def staged_streams(self) -> int:
        """Streamed transactions staged and not yet committed or aborted."""
        return len(self._streams)

    @property
    def staged_bytes(self) -> int:
        """Memory held by staged streamed transactions (what spilled is not counted)."""
        return self._staged_memory

    def should_flush(
        self, now: float, flush_rows: int, flush_bytes: int, flush_interval: float
    ) -> bool:
        """True when committed changes are buffered and a trigger fired. The interval counts
        from the first call that saw the buffer dirty, so call this at least once per loop."""
        if not self._dirty:
            return False
        if self._dirty_since is None:
            self._dirty_since = now
        return (
            self._pending_rows >= flush_rows
            or self._pending_bytes >= flush_bytes
            or now - self._dirty_since >= flush_interval
        )

    def flush_due(self, flush_interval: float) -> float | None:
        """When the interval trigger fires (a monotonic time), or None when nothing
        committed is buffered (or `should_flush` has not seen it yet)."""
        if not self._dirty or self._dirty_since is None:
            return None
        return self._dirty_since + flush_interval

    # ---- relations ----------------------------------------------------------------

    def needs_flush_before(self, rel: Relation, key: TableKey | None = None) -> bool:
        """True when `relation(rel, key)` would change the layout of a table that has
        buffered changes (or reuse its name under another relation id): drain and make
        those durable first."""
        table = self._dirty.get(rel.relation_id)
        if table is not None:
            return _layout(table.relation) != _layout(rel) or (key is not None and key != table.key)
        name = (rel.namespace, rel.name)
        return any((t.relation.namespace, t.relation.name) == name for t in self._dirty.values())

    def relation(self, rel: Relation, key: TableKey) -> None:
        """Register or update a table's layout and key (a Relation message)."""
        rid = rel.relation_id
        table = self._tables.get(rid)
        if table is not None and table.key == key and _layout(table.relation) == _layout(rel):
            return  # the same layout, sent again
        if self.needs_flush_before(rel, key):
            raise StreambedError(
                f"relation {qualified(rel)} changed while changes to it are buffered; "
                "drain the buffer first (needs_flush_before)",
                kind=Kind.INTERNAL,
            )
        if table is not None and self._staged_for(rid):
            raise SchemaError(
                f"{qualified(rel)} changed its columns or key inside a transaction that had "
                "already changed its rows; streambed cannot apply one transaction under two "
                "table layouts. Exclude the table (STREAMBED_EXCLUDE_TABLES) and resync it"
            )
        self._tables[rid] = make_table(rel, key)

    def _staged_for(self, relation_id: int) -> bool:
        if self._stage is not None and relation_id in self._stage:
            return True
        return any(relation_id in s.relation_ids for s in self._streams.values())

    # ---- ordinary transactions -----------------------------------------------------

    def begin(self, xid: int) -> None:
        if self._stage is not None or self._stream is not None:
            raise _protocol(f"Begin of xid {xid} inside another transaction")
        self._stage = {}

    def commit(self, commit_lsn: int, end_lsn: int) -> None:
        stage = self._stage
        if stage is None:
            raise _protocol(f"Commit at {format_lsn(commit_lsn)} without Begin")
        self._stage = None
        if self._taken(commit_lsn):
            return
        for rid, ops in stage.items():
            table = self._target(rid, commit_lsn)
            if table is not None:
                self._apply(rid, table, ops)
        self._last_commit_lsn = commit_lsn
        self._last_end_lsn = end_lsn

    # ---- row changes (ordinary or streamed) ------------------------------------------

    def insert(self, msg: Insert) -> None:
        stage = self._stage
        if stage is None:
            self._stage_streamed(msg.relation_id, msg.xid, msg.new, row_bytes(msg.new))
            return
        ops = stage.get(msg.relation_id)
        if ops is None:
            stage[msg.relation_id] = [msg.new]
        else:
            ops.append(msg.new)

    def insert_row(self, relation_id: int, new: TupleData) -> None:
        """`insert(Insert(relation_id, new))` of an Insert outside a streamed block, without
        the message object (`Decoder.insert_row`)."""
        stage = self._stage
        if stage is None:
            self._stage_streamed(relation_id, None, new, row_bytes(new))
            return
        ops = stage.get(relation_id)
        if ops is None:
            stage[relation_id] = [new]
        else:
            ops.append(new)

    def update(self, msg: Update) -> None:
        stage = self._stage
        if stage is None:
            size = row_bytes(msg.new) + (0 if msg.old is None else row_bytes(msg.old))
            self._stage_streamed(msg.relation_id, msg.xid, msg, size)
            return
        ops = stage.get(msg.relation_id)
        if ops is None:
            stage[msg.relation_id] = [msg]
        else:
            ops.append(msg)

    def delete(self, msg: Delete) -> None:
        stage = self._stage
        if stage is None:
            self._stage_streamed(msg.relation_id, msg.xid, msg, row_bytes(msg.old))
            return
        ops = stage.get(msg.relation_id)
        if ops is None:
            stage[msg.relation_id] = [msg]
        else:
            ops.append(msg)

    def truncate(self, msg: Truncate) -> None:
        stage = self._stage
        for rid in msg.relation_ids:
            if stage is None:
                self._stage_streamed(rid, msg.xid, msg, _TRUNCATE_BYTES)
            else:
                stage.setdefault(rid, []).append(msg)

    # ---- streamed transactions ----------------------------------------------------------

    def stream_start(self, xid: int, first_segment: bool = False) -> None:
        if self._stage is not None or self._stream is not None:
            raise _protocol(f"Stream Start of xid {xid} inside another transaction")
        staging = self._streams.get(xid)
        if staging is not None and first_segment:
            # The source re-sends the transaction from its start (after a reconnect).
            self._drop_stream(xid)
            staging = None
        if staging is None:
            staging = self._streams[xid] = self._new_staging(xid)
        self._stream = staging

    def stream_stop(self) -> None:
        if self._stream is None:
            raise _protocol("Stream Stop without Stream Start")
        self._stream = None

    def stream_commit(self, xid: int, commit_lsn: int, end_lsn: int) -> None:
        if self._stage is not None or self._stream is not None:
            raise _protocol(f"Stream Commit of xid {xid} inside a transaction")
        staging = self._streams.pop(xid, None)
        if staging is None:
            staging = self._new_staging(xid)  # nothing of ours in it
        self._staged_memory -= staging.memory
        try:
            if not self._taken(commit_lsn):
                targets: dict[int, TableBuffer | None] = {}
                part_bytes = self._txn_memory_bytes // self.part_fraction
                for ops_by_relation in staging.replay():
                    for rid, ops in ops_by_relation.items():
                        if rid in targets:
                            table = targets[rid]
                        else:
                            table = targets[rid] = self._target(rid, commit_lsn)
                        if table is None:
                            continue
                        if self._stage_part is None:
                            self._apply(rid, table, ops)
                            continue
                        step = self.part_check_ops
                        for start in range(0, len(ops), step):
                            self._apply(rid, table, ops[start : start + step])
                            if table.bytes > part_bytes:
                                self._hand_over(table, commit_lsn)
                self._last_commit_lsn = commit_lsn
                self._last_end_lsn = end_lsn
        finally:
            staging.discard()

    def stream_abort(self, xid: int, subxid: int) -> None:
        """Drop a streamed transaction (subxid == xid) or one of its subtransactions."""
        if subxid == xid:
            self._drop_stream(xid)
            return
        staging = self._streams.get(xid)
        if staging is not None:
            self._staged_memory -= staging.abort_subtransaction(subxid)

    def discard_uncommitted(self) -> None:
        """Forget the open transaction and every staged stream (before a reconnect: the
        source sends them again). Committed, buffered changes stay."""
        self._stage = None
        self._stream = None
        for xid in list(self._streams):
            self._drop_stream(xid)

    # ---- handing over -------------------------------------------------------------------

    def drain(self) -> list[TableDelta]:
        """Every dirty table's delta, all at the last commit LSN; the buffers are then empty.
        Tables whose changes cancelled out (insert then delete) give no delta."""
        if not self._dirty:
            return []
        commit_lsn = self._last_commit_lsn
        assert commit_lsn is not None  # dirty implies a commit was taken
        deltas = []
        for table in self._dirty.values():
            delta = table.drain(commit_lsn)
            if delta is not None:
                deltas.append(delta)
        self._dirty = {}
        self._pending_rows = 0
        self._pending_bytes = 0
        self._dirty_since = None
        return deltas

    def take_changes(self) -> dict[tuple[str, str], dict[str, int]]:
        """The changes taken since the last call, per (schema, table) and operation (insert,
        update, delete, truncate); empty without `count_changes`."""
        if not self._counts:
            return {}
        out: dict[tuple[str, str], dict[str, int]] = {}
        for rid, counts in self._counts.items():
            relation = self._tables[rid].relation
            per_table = out.setdefault((relation.namespace, relation.name), {})
            for kind, count in counts.items():
                operation = OPERATIONS[kind]
                per_table[operation] = per_table.get(operation, 0) + count
        self._counts = {}
        return out

    # ---- internals ----------------------------------------------------------------------

    def _taken(self, commit_lsn: int) -> bool:
        """True when this commit was already taken (re-sent after a reconnect)."""
        return self._last_commit_lsn is not None and commit_lsn <= self._last_commit_lsn

    def _target(self, rid: int, commit_lsn: int) -> TableBuffer | None:
        """The table a transaction committed at `commit_lsn` changes, or None when the lake
        already has it (replay must not apply it twice)."""
        table = self._tables.get(rid)
        if table is None:
            raise _protocol(f"change for relation id {rid} before its Relation message")
        frontier = self._frontier(table.relation.namespace, table.relation.name)
        if frontier is not None and frontier >= commit_lsn:
            return None
        return table

    def _apply(self, rid: int, table: TableBuffer, ops: Iterable[Op]) -> None:
        if self._counts is not None:
            counts = self._counts.get(rid)
            if counts is None:
                counts = self._counts[rid] = Counter()
            counts.update(map(type, ops))
        entries, size = table.apply(ops)
        self._pending_rows += entries
        self._pending_bytes += size
        self._dirty[rid] = table

    def _hand_over(self, table: TableBuffer, commit_lsn: int) -> None:
        """Give a part of a large committed transaction to `stage` (see the module doc)."""
        if self._stage_part is None:
            return
        self._pending_rows -= table.entries
        self._pending_bytes -= table.bytes
        part = table.drain(commit_lsn, final=False)
        if part is not None:
            self._stage_part(part)

    def _stage_streamed(self, rid: int, subxid: int | None, op: Op, size: int) -> None:
        staging = self._stream
        if staging is None:
            raise _protocol(f"change for relation id {rid} outside a transaction")
        self._staged_memory += staging.add(rid, staging.xid if subxid is None else subxid, op, size)
        if self._staged_memory > self._txn_memory_bytes:
            for other in self._streams.values():
                self._staged_memory -= other.spill()

    def _new_staging(self, xid: int) -> StreamStaging:
        return StreamStaging(xid, self._spill_dir, self._txn_memory_bytes // self.segment_fraction)

    def _drop_stream(self, xid: int) -> None:
        staging = self._streams.pop(xid, None)
        if staging is not None:
            self._staged_memory -= staging.memory
            staging.discard()
