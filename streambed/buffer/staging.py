"""Staging of one streamed (in-progress) transaction, in memory or spilled to disk.

A streamed transaction arrives in blocks between Stream Start and Stream Stop, interleaved
with other transactions, and may still abort, as a whole or one subtransaction at a time.
Its changes are kept as a list of segments: consecutive changes of the same
(sub)transaction id, grouped by relation, and no bigger than `segment_bytes` (a longer run
of one subtransaction is cut into several segments). Order within a relation is what
matters, and segments keep it. When memory runs short, the segments are appended to a
spill file, one pickle per segment, and memory is freed; on commit the file is read back
one segment at a time, so replaying holds at most one segment of it in memory.

Pickling runs in fast mode (no memo): staged rows are tuples of bytes, never
self-referential, and the memo would cost ~16-32 bytes per pickled object, as much as
the rows themselves, while a spill is being written.
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from streambed.buffer.table import Op

SPILL_SUFFIX: Final = ".spill"

DEFAULT_SEGMENT_BYTES: Final = 4 * 1024 * 1024

MESSAGE_BYTES: Final = 112
"""What an Update/Delete/Truncate message object costs beyond its tuples (a frozen
dataclass with a `__dict__`, measured with tracemalloc); an insert is staged as its bare
tuple."""

OpsByRelation = dict[int, list[Op]]


class _Segment:
    __slots__ = ("bytes", "ops", "subxid")

    def __init__(self, subxid: int) -> None:
        self.subxid = subxid
        self.ops: OpsByRelation = {}
        self.bytes = 0


class StreamStaging:
    """The staged changes of one streamed transaction `xid`."""

    __slots__ = (
        "_current",
        "aborted",
        "memory",
        "relation_ids",
        "segment_bytes",
        "segments",
        "spill_path",
        "spilled",
        "xid",
    )

    def __init__(
        self, xid: int, spill_dir: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ) -> None:
        self.xid = xid
        self.spill_path = spill_dir / f"{xid}{SPILL_SUFFIX}"
        self.segment_bytes = max(1, segment_bytes)
        self.segments: deque[_Segment] = deque()
        self.memory = 0
        self.relation_ids: set[int] = set()
        self.aborted: set[int] = set()  # subtransactions aborted after part of them spilled
        self.spilled = False
        self._current: _Segment | None = None

    def add(self, relation_id: int, subxid: int, op: Op, size: int) -> int:
        """Stage one change of `size` bytes (its rows'); returns the memory counted for it."""
        if type(op) is not tuple:
            size += MESSAGE_BYTES
        segment = self._current
        if segment is None or segment.subxid != subxid or segment.bytes >= self.segment_bytes:
            segment = self._current = _Segment(subxid)
            self.segments.append(segment)
        ops = segment.ops.get(relation_id)
        if ops is None:
            segment.ops[relation_id] = [op]
            self.relation_ids.add(relation_id)
        else:
            ops.append(op)
        segment.bytes += size
        self.memory += size
        return size

    def abort_subtransaction(self, subxid: int) -> int:
        """Drop the changes of one subtransaction; returns the memory freed."""
        if self.spilled:
            self.aborted.add(subxid)
        kept = deque(s for s in self.segments if s.subxid != subxid)
        freed = sum(s.bytes for s in self.segments if s.subxid == subxid)
        self.segments = kept
        if self._current is not None and self._current.subxid == subxid:
            self._current = None
        self.memory -= freed
        return freed

    def spill(self) -> int:
        """Append the in-memory segments to the spill file; returns the memory freed."""
        if not self.segments:
            return 0
        with self.spill_path.open("ab") as f:
            pickler = pickle.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)
            pickler.fast = True  # no memo: see the module doc
            for segment in self.segments:
                pickler.dump((segment.subxid, segment.ops))
        self.segments.clear()
        self.spilled = True
        freed = self.memory
        self._current = None
        self.memory = 0
        return freed

    def replay(self) -> Iterator[OpsByRelation]:
        """Every committed segment's changes, in the order they were staged. Segments
        held in memory are released as they are handed out; a spilled transaction has
        its in-memory rest spilled first, so at most one segment is in memory at a time.
        The caller must not keep a segment once it asks for the next one."""
        if self.spilled:
            self.spill()
            with self.spill_path.open("rb") as f:
                unpickler = pickle.Unpickler(f)
                while True:
                    try:
                        subxid, ops = unpickler.load()
                    except EOFError:
                        break
                    if subxid not in self.aborted:
                        yield ops
                    del ops
            return
        self._current = None
        while self.segments:
            segment = self.segments.popleft()
            self.memory -= segment.bytes
            ops = segment.ops
            del segment
            yield ops
            del ops

    def discard(self) -> None:
        """Forget everything and remove the spill file."""
        self.segments.clear()
        self._current = None
        self.memory = 0
        if self.spilled:
            self.spill_path.unlink(missing_ok=True)
            self.spilled = False
