"""SQL-level cursors: DECLARE, FETCH, MOVE and CLOSE over a streamed DuckDB result.

psycopg's server-side (named) cursors and psql's FETCH_COUNT declare a cursor in a
transaction block and fetch it in pieces. A `SqlCursor` holds the query's Arrow record batch
reader (on a DuckDB connection of its own, so the session's other statements do not close
it) and hands out the next rows on each FETCH. Forward only: the rows are streamed, never
kept, so FETCH BACKWARD / PRIOR / FIRST and ABSOLUTE behind the position are refused.

No I/O beyond the reader; `streambed.server.database.DbSession` owns the cursors and the
transaction rules (a cursor without HOLD closes at the end of its transaction).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pglast import ast, enums

FETCH_ALL = 9223372036854775807  # what the parser gives for FETCH ALL

HOLD = enums.CURSOR_OPT_HOLD
BINARY = enums.CURSOR_OPT_BINARY


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

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.pending = None
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


def _backward() -> CursorError:
    return CursorError(
        "cursor can only scan forward (streambed streams cursor rows and does not keep them; "
        "declare it again to start over)",
        "55000",
    )
