"""SQL-level cursors: DECLARE, FETCH, MOVE and CLOSE over a streamed DuckDB result.

psycopg's server-side (named) cursors and psql's FETCH_COUNT declare a cursor in a
transaction block and fetch it in pieces. A `SqlCursor` holds the query's Arrow record batch
reader (on a DuckDB connection of its own, so the session's other statements do not close
it) and hands out the next rows on each FETCH. A cursor is forward only unless declared
SCROLL: its rows are streamed, never kept, so FETCH BACKWARD / PRIOR / FIRST and ABSOLUTE
behind the position are refused (55000, as Postgres for a NO SCROLL cursor). A SCROLL
cursor keeps every row it has read (in memory, as Arrow batches; Postgres keeps them in a
tuplestore that spills to disk) and moves in every direction with Postgres's positions:
0 before the first row, 1..N on a row, N+1 after the last.

No I/O beyond the reader; `streambed.server.database.DbSession` owns the cursors and the
transaction rules (a cursor without HOLD closes at the end of its transaction).
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pglast import ast, enums

FETCH_ALL = 9223372036854775807  # what the parser gives for FETCH ALL

HOLD = enums.CURSOR_OPT_HOLD
BINARY = enums.CURSOR_OPT_BINARY
SCROLL = enums.CURSOR_OPT_SCROLL


class CursorError(Exception):
    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate


@dataclass
class SqlCursor:
    """One declared cursor: its result columns and the rows not fetched yet."""

    name: str
    columns: list[Any]  # database.ColumnInfo
    batches: Iterator[pa.RecordBatch]
    hold: bool
    in_transaction: bool  # declared inside a transaction block (closed by its ROLLBACK)
    savepoint_level: int = 0  # savepoints open at DECLARE (ROLLBACK TO an earlier one closes it)
    connection: Any = None  # the DuckDB connection streaming the rows (cancel interrupts it)
    on_close: Callable[[], None] | None = None
    position: int = 0  # rows consumed so far (Postgres's portal position)
    pending: pa.RecordBatch | None = None
    exhausted: bool = False
    closed: bool = field(default=False, repr=False)
    scroll: bool = False
    kept: list[pa.RecordBatch] = field(default_factory=list, repr=False)  # SCROLL: rows read
    kept_starts: list[int] = field(default_factory=list, repr=False)  # 0-based first row of each
    kept_rows: int = 0

    def _next_batch(self) -> pa.RecordBatch | None:
        batch, self.pending = self.pending, None
        while batch is None or batch.num_rows == 0:
            if self.exhausted:
                return None
            batch = next(self.batches, None)
            if batch is None:
                self.exhausted = True
                return None
        return batch

    def take(self, count: int) -> Iterator[pa.RecordBatch]:
        """The next `count` rows (fewer at the end), as record batches."""
        left = count
        while left > 0:
            batch = self._next_batch()
            if batch is None:
                return
            if batch.num_rows > left:
                self.pending = batch.slice(left)
                batch = batch.slice(0, left)
            left -= batch.num_rows
            self.position += batch.num_rows
            yield batch

    def skip(self, count: int) -> int:
        """Move forward over `count` rows; returns how many there were."""
        return sum(batch.num_rows for batch in self.take(count))

    # ---- SCROLL cursors ------------------------------------------------------------------

    def scroll_fetch(self, stmt: ast.FetchStmt) -> list[pa.RecordBatch]:
        """The rows a FETCH (or MOVE) on a SCROLL cursor returns, in order; moves the cursor."""
        step = scroll_step(stmt)
        if step.kind == "absolute" and step.count < 0:
            self._read_to(FETCH_ALL)
        elif step.kind == "absolute":
            self._read_to(step.count)
        elif step.kind == "forward" or (step.kind == "relative" and step.count > 0):
            self._read_to(self.position + step.count)
        total = self.kept_rows if self.exhausted else None
        rows, self.position = scroll_target(step, self.position, self.kept_rows, total)
        return self._rows(rows)

    def _read_to(self, row: int) -> None:
        """Read until row `row` (1-based) is kept or the result ends."""
        while self.kept_rows < row and not self.exhausted:
            batch = self._next_batch()
            if batch is not None:
                self.kept.append(batch)
                self.kept_starts.append(self.kept_rows)
                self.kept_rows += batch.num_rows

    def _rows(self, rows: range) -> list[pa.RecordBatch]:
        """Kept rows at 1-based positions `rows` (a range, possibly descending)."""
        if not rows:
            return []
        low, high = min(rows[0], rows[-1]) - 1, max(rows[0], rows[-1])  # 0-based [low, high)
        pieces = []
        index = bisect.bisect_right(self.kept_starts, low) - 1
        while index < len(self.kept) and self.kept_starts[index] < high:
            batch, start = self.kept[index], self.kept_starts[index]
            lo, hi = max(low, start), min(high, start + batch.num_rows)
            pieces.append(batch.slice(lo - start, hi - lo))
            index += 1
        if rows.step > 0:
            return pieces
        table = pa.Table.from_batches(pieces, schema=self.kept[0].schema)
        backward: list[pa.RecordBatch] = table.take(
            pa.array(range(table.num_rows - 1, -1, -1), pa.int64())
        ).to_batches()
        return backward

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.pending = None
        self.kept, self.kept_starts = [], []
        close = getattr(self.batches, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()
        if self.on_close is not None:
            self.on_close()


def forward_count(stmt: ast.FetchStmt, cursor: SqlCursor) -> tuple[int, int]:
    """(rows to skip, rows to return) for a FETCH/MOVE on a forward-only cursor."""
    how_many = stmt.howMany if stmt.howMany is not None else 1
    direction = stmt.direction
    D = enums.FetchDirection
    if direction == D.FETCH_FORWARD:
        if how_many < 0:
            raise _backward()
        return 0, how_many
    if direction == D.FETCH_RELATIVE:
        # RELATIVE n: the n-th row after the current one; RELATIVE 0 re-reads the current row
        if how_many <= 0:
            raise _backward()
        return how_many - 1, 1
    if direction == D.FETCH_ABSOLUTE:
        if how_many <= cursor.position:
            raise _backward()
        return how_many - 1 - cursor.position, 1
    raise _backward()


@dataclass(frozen=True)
class ScrollStep:
    """A FETCH direction reduced to one of: forward n, backward n, absolute n, relative n."""

    kind: str
    count: int


def scroll_step(stmt: ast.FetchStmt) -> ScrollStep:
    how_many = stmt.howMany if stmt.howMany is not None else 1
    D = enums.FetchDirection
    direction = stmt.direction
    if direction == D.FETCH_ABSOLUTE:
        return ScrollStep("absolute", how_many)
    if direction == D.FETCH_RELATIVE:
        return ScrollStep("relative", how_many)
    if direction == D.FETCH_BACKWARD:
        how_many = -how_many
    if how_many == 0:
        return ScrollStep("relative", 0)  # FORWARD 0 / BACKWARD 0: the current row again
    if how_many < 0:
        return ScrollStep("backward", -how_many)
    return ScrollStep("forward", how_many)


def scroll_target(
    step: ScrollStep, position: int, known: int, total: int | None
) -> tuple[range, int]:
    """(1-based rows returned, in order; the new position) of `step` from `position`.

    `known` rows have been read; `total` is the row count once the result has ended (the
    caller reads far enough first: to the target row, or to the end for a negative
    ABSOLUTE). Positions as Postgres's portal: 0 before the first row, N+1 after the last.
    """
    end = total + 1 if total is not None else None  # the position after the last row

    def landing(row: int) -> tuple[range, int]:
        if row <= 0:
            return range(0), 0
        if row > known:
            assert end is not None, "read to the row first"
            return range(0), end
        return range(row, row + 1), row

    if step.kind == "forward":
        last = position + step.count
        if last > known:
            assert end is not None, "read to the row first"
            return range(position + 1, end), end
        return range(position + 1, last + 1), last
    if step.kind == "backward":
        if end is not None and position > end:
            position = end
        first = position - step.count
        if first < 1:
            return range(position - 1, 0, -1), 0
        return range(position - 1, first - 1, -1), first
    if step.kind == "absolute":
        if step.count < 0:
            assert total is not None, "read to the end first"
            return landing(total + 1 + step.count)
        return landing(step.count)
    # relative
    if step.count == 0:
        if 1 <= position <= known:
            return range(position, position + 1), position
        return range(0), position
    return landing(position + step.count)


def _backward() -> CursorError:
    return CursorError(
        "cursor can only scan forward (declare it with the SCROLL option to enable backward "
        "scan, or declare it again to start over)",
        "55000",
    )
