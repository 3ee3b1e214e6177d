"""Staging of one streamed (in-progress) transaction, in memory or spilled to disk.

A streamed transaction arrives in blocks between Stream Start and Stream Stop, interleaved
with other transactions, and may still abort, as a whole or one subtransaction at a time.
Its changes are kept as a list of segments: consecutive changes of the same
(sub)transaction id, grouped by relation. Order within a relation is what matters, and
segments keep it. When memory runs short, the segments are appended to a spill file (one
pickle per spill) and memory is freed; on commit the file is read back one spill at a time.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from streambed.buffer.table import Op

SPILL_SUFFIX: Final = ".spill"

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
        "segments",
        "spill_path",
        "spilled",
        "xid",
    )

    def __init__(self, xid: int, spill_dir: Path) -> None:
        self.xid = xid
        self.spill_path = spill_dir / f"{xid}{SPILL_SUFFIX}"
        self.segments: list[_Segment] = []
        self.memory = 0
        self.relation_ids: set[int] = set()
        self.aborted: set[int] = set()  # subtransactions aborted after part of them spilled
        self.spilled = False
        self._current: _Segment | None = None

    def add(self, relation_id: int, subxid: int, op: Op, size: int) -> None:
        segment = self._current
        if segment is None or segment.subxid != subxid:
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

    def abort_subtransaction(self, subxid: int) -> int:
        """Drop the changes of one subtransaction; returns the memory freed."""
        if self.spilled:
            self.aborted.add(subxid)
        kept = [s for s in self.segments if s.subxid != subxid]
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
        chunk = [(s.subxid, s.ops) for s in self.segments]
        with self.spill_path.open("ab") as f:
            pickle.dump(chunk, f, protocol=pickle.HIGHEST_PROTOCOL)
        self.spilled = True
        freed = self.memory
        self.segments = []
        self._current = None
        self.memory = 0
        return freed

    def replay(self) -> Iterator[OpsByRelation]:
        """Every committed segment's changes, in the order they were staged."""
        if self.spilled:
            with self.spill_path.open("rb") as f:
                while True:
                    try:
                        chunk: list[tuple[int, OpsByRelation]] = pickle.load(f)
                    except EOFError:
                        break
                    for subxid, ops in chunk:
                        if subxid not in self.aborted:
                            yield ops
        for segment in self.segments:
            yield segment.ops

    def discard(self) -> None:
        """Forget everything and remove the spill file."""
        self.segments = []
        self._current = None
        self.memory = 0
        if self.spilled:
            self.spill_path.unlink(missing_ok=True)
            self.spilled = False
