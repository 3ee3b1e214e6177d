"""The local state store: a fast-startup cache of replication progress, in SQLite.

Tables:
- `tables`: one row per replicated table: relation id, copy status, frontier LSN (what is
  durable in the lake for it) and the Iceberg metadata location at that frontier.
- `watermarks`: the consistent points (one per flush): LSN, time, and every table's
  metadata location at it, keyed by `streambed.core.names.qualified` (`public.orders`;
  `a."b.c"` for a name with a dot); the last `WATERMARK_HISTORY` are kept.
- `meta`: small key/value settings (schema version, slot, ...).
- `copies`: the copy in progress of each table in status `copying` (run id, output
  directory, seam), so a restart can remove the files of an interrupted copy.
- `resync_requests`: tables an operator asked to copy again (`streambed resync`).
- `memberships`: the publication rows that put each table in the publication when last
  seen (`streambed.copy.manager`: a table whose rows were all replaced was out of the
  publication in between, and is copied again).
- `forgotten`: tables `forget` removed (no longer streamed, dropped in the source) and not
  registered since: their lake tables are kept, and are streambed's, so `streambed sweep`
  still removes the files no snapshot of them references (`streambed.lake.sweep`).

The Iceberg snapshot summary is the source of truth; `reconcile` lets it win at start.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, cast, get_args

from sqlite_utils import Database

from streambed.core.errors import StateError
from streambed.core.lsn import format_lsn

BUSY_TIMEOUT: Final = 30.0
"""Seconds a write waits for another process's write to end."""

Status = Literal["pending", "copying", "ready"]
STATUSES: Final[tuple[str, ...]] = get_args(Status)
WATERMARK_HISTORY: Final = 100
SCHEMA_VERSION: Final = "1"


@dataclass(frozen=True)
class TableState:
    schema: str
    name: str
    relation_id: int
    status: Status
    frontier_lsn: int | None  # None until the table's first commit to the lake
    metadata_location: str | None
    updated_at: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class Watermark:
    """A consistent point: every table in `tables` is at `lsn` at that metadata location."""

    lsn: int
    committed_at: str
    tables: Mapping[str, str]  # "schema.table" -> metadata location


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class StateStore:
    """Replication progress in one SQLite file (WAL journal), safe to share between threads.

    Contract: progress never moves backward. `set_frontier` and `record_watermark` refuse
    a lower LSN than the stored one with a `StateError` (that is a bug in the caller), and
    `reconcile` only moves the stored frontier forward to match Iceberg; when the store is
    ahead of Iceberg it refuses, because only an operator can decide to resync. The one
    explicit way back is `forget`, for a table that is being copied again from scratch.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        conn = sqlite3.connect(
            path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT
        )
        self._db = Database(conn)
        self._db.enable_wal()
        with self._lock, self._transaction():
            self._create()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- tables ---------------------------------------------------------------------

    def register(self, schema: str, name: str, relation_id: int, status: Status) -> TableState:
        """Add a table or update its relation id and status; its frontier is kept."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        with self._lock, self._transaction():
            self._db.execute(
                "INSERT INTO tables (schema, name, relation_id, status, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (schema, name) DO UPDATE SET "
                "relation_id = excluded.relation_id, status = excluded.status, "
                "updated_at = excluded.updated_at",
                [schema, name, relation_id, status, _now()],
            )
            self._db.execute("DELETE FROM forgotten WHERE schema = ? AND name = ?", [schema, name])
            return self._require(schema, name)

    def table(self, schema: str, name: str) -> TableState | None:
        with self._lock:
            rows = list(
                self._db.query("SELECT * FROM tables WHERE schema = ? AND name = ?", [schema, name])
            )
        return _table_state(rows[0]) if rows else None

    def tables(self) -> list[TableState]:
        with self._lock:
            rows = list(self._db.query("SELECT * FROM tables ORDER BY schema, name"))
        return [_table_state(row) for row in rows]

    def set_frontier(self, schema: str, name: str, lsn: int, metadata_location: str) -> None:
        """Record that the lake holds `schema.name` up to `lsn`. Never moves backward."""
        with self._lock, self._transaction():
            current = self._require(schema, name)
            if current.frontier_lsn is not None and lsn < current.frontier_lsn:
                raise StateError(
                    f"refusing to move the frontier of {current.qualified} back from "
                    f"{format_lsn(current.frontier_lsn)} to {format_lsn(lsn)}: progress only "
                    "moves forward; this is a bug in streambed"
                )
            self._write_frontier(schema, name, lsn, metadata_location)

    def forget(self, schema: str, name: str) -> None:
        """Remove a table's state, so it is registered and copied again from scratch. It is
        listed in `forgotten` until it is registered again."""
        with self._lock, self._transaction():
            self._db.execute("DELETE FROM tables WHERE schema = ? AND name = ?", [schema, name])
            self._db.execute(
                "DELETE FROM memberships WHERE schema = ? AND name = ?", [schema, name]
            )
            self._db.execute(
                "INSERT OR REPLACE INTO forgotten (schema, name, forgotten_at) VALUES (?, ?, ?)",
                [schema, name, _now()],
            )

    def forgotten(self) -> list[tuple[str, str]]:
        """(schema, name) of each table forgotten and not registered since."""
        with self._lock:
            rows = list(self._db.query("SELECT schema, name FROM forgotten ORDER BY schema, name"))
        return [(r["schema"], r["name"]) for r in rows]

    def drop_forgotten(self, schema: str, name: str) -> None:
        """Stop listing a forgotten table (its lake table is gone)."""
        with self._lock, self._transaction():
            self._db.execute("DELETE FROM forgotten WHERE schema = ? AND name = ?", [schema, name])

    def reconcile(
        self, schema: str, name: str, iceberg_lsn: int | None, metadata_location: str | None
    ) -> TableState:
        """Make the stored frontier agree with Iceberg's (the source of truth) at start.

        Iceberg ahead (a crash after its commit, before the state update): move forward.
        Stored frontier ahead (the lake table was rolled back or replaced): `StateError`.
        `iceberg_lsn` None means the lake table has no streambed snapshot.
        """
        with self._lock, self._transaction():
            current = self._require(schema, name)
            stored = current.frontier_lsn
            if stored is not None and (iceberg_lsn is None or iceberg_lsn < stored):
                lake = (
                    "has no streambed snapshot"
                    if iceberg_lsn is None
                    else (f"is at {format_lsn(iceberg_lsn)}")
                )
                raise StateError(
                    f"the lake table {current.qualified} {lake}, but the state store says "
                    f"{format_lsn(stored)} was already committed: the lake table was rolled "
                    "back or replaced, and the changes in between are no longer in the "
                    f"source's replication slot. Resync {current.qualified}: drop the lake "
                    "table and start streambed again to copy it from the source"
                )
            if iceberg_lsn is None or metadata_location is None:
                return current
            if iceberg_lsn != stored or metadata_location != current.metadata_location:
                self._write_frontier(schema, name, iceberg_lsn, metadata_location)
            return self._require(schema, name)

    # ---- copies ------------------------------------------------------------------------

    def begin_copy(
        self, schema: str, name: str, relation_id: int, run_id: str, output_dir: str, seam: int
    ) -> None:
        """Mark a table `copying` and remember the copy (see `copies` in the module doc).
        The stored frontier is cleared: the table's lake contents are being replaced."""
        with self._lock, self._transaction():
            self._db.execute(
                "INSERT INTO tables (schema, name, relation_id, status, updated_at) "
                "VALUES (?, ?, ?, 'copying', ?) ON CONFLICT (schema, name) DO UPDATE SET "
                "relation_id = excluded.relation_id, status = 'copying', frontier_lsn = NULL, "
                "metadata_location = NULL, updated_at = excluded.updated_at",
                [schema, name, relation_id, _now()],
            )
            self._db.execute("DELETE FROM forgotten WHERE schema = ? AND name = ?", [schema, name])
            self._db.execute(
                "INSERT OR REPLACE INTO copies (schema, name, run_id, output_dir, seam_lsn, "
                "started_at) VALUES (?, ?, ?, ?, ?, ?)",
                [schema, name, run_id, output_dir, seam, _now()],
            )

    def finish_copy(self, schema: str, name: str, lsn: int, metadata_location: str) -> None:
        """A copy committed at `lsn`: the table is `ready` with that frontier. The one place
        besides `forget` where a frontier may be replaced by a lower one (a re-copy replaces
        the table's contents)."""
        with self._lock, self._transaction():
            self._require(schema, name)
            self._db.execute(
                "UPDATE tables SET status = 'ready', frontier_lsn = ?, metadata_location = ?, "
                "updated_at = ? WHERE schema = ? AND name = ?",
                [lsn, metadata_location, _now(), schema, name],
            )
            self._db.execute("DELETE FROM copies WHERE schema = ? AND name = ?", [schema, name])

    def abandon_copy(self, schema: str, name: str) -> None:
        """A copy failed or was interrupted: the table is `pending` (copied again later)."""
        with self._lock, self._transaction():
            self._db.execute(
                "UPDATE tables SET status = 'pending', updated_at = ? "
                "WHERE schema = ? AND name = ?",
                [_now(), schema, name],
            )
            self._db.execute("DELETE FROM copies WHERE schema = ? AND name = ?", [schema, name])

    def copies(self) -> list[tuple[str, str, str, str, int]]:
        """(schema, name, run_id, output_dir, seam) of every copy not finished or abandoned."""
        with self._lock:
            rows = list(self._db.query("SELECT * FROM copies ORDER BY schema, name"))
        return [(r["schema"], r["name"], r["run_id"], r["output_dir"], r["seam_lsn"]) for r in rows]

    def memberships(self) -> dict[tuple[str, str], frozenset[str]]:
        """Each table's publication membership as last seen
        (`streambed.source.setup.Membership`)."""
        with self._lock:
            rows = list(self._db.query("SELECT schema, name, rows FROM memberships"))
        return {(r["schema"], r["name"]): frozenset(json.loads(r["rows"])) for r in rows}

    def set_membership(self, schema: str, name: str, rows: frozenset[str]) -> None:
        with self._lock, self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO memberships (schema, name, rows) VALUES (?, ?, ?)",
                [schema, name, json.dumps(sorted(rows))],
            )

    def request_resync(self, schema: str, name: str) -> None:
        with self._lock, self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO resync_requests (schema, name, requested_at) "
                "VALUES (?, ?, ?)",
                [schema, name, _now()],
            )

    def resync_requested(self, schema: str, name: str) -> bool:
        """Whether a resync of the table is asked for and not yet taken up by a copy."""
        with self._lock:
            rows = self._db.query(
                "SELECT 1 FROM resync_requests WHERE schema = ? AND name = ?", [schema, name]
            )
            return any(True for _ in rows)

    def take_resync_requests(self) -> list[tuple[str, str]]:
        """The requested tables, removed from the queue."""
        with self._lock, self._transaction():
            rows = list(self._db.query("SELECT schema, name FROM resync_requests"))
            self._db.execute("DELETE FROM resync_requests")
        return [(r["schema"], r["name"]) for r in rows]

    # ---- watermarks -------------------------------------------------------------------

    def record_watermark(self, lsn: int, tables: Mapping[str, str]) -> None:
        """Record a consistent point; LSNs only increase. Keeps the last
        `WATERMARK_HISTORY` watermarks."""
        with self._lock, self._transaction():
            latest = self._latest_watermark()
            if latest is not None and lsn < latest.lsn:
                raise StateError(
                    f"refusing to record watermark {format_lsn(lsn)} after "
                    f"{format_lsn(latest.lsn)}: progress only moves forward; this is a bug "
                    "in streambed"
                )
            self._db.execute(
                "INSERT OR REPLACE INTO watermarks (lsn, committed_at, tables) VALUES (?, ?, ?)",
                [lsn, _now(), json.dumps(dict(tables), sort_keys=True)],
            )
            self._db.execute(
                "DELETE FROM watermarks WHERE lsn NOT IN "
                "(SELECT lsn FROM watermarks ORDER BY lsn DESC LIMIT ?)",
                [WATERMARK_HISTORY],
            )

    def latest_watermark(self) -> Watermark | None:
        with self._lock:
            return self._latest_watermark()

    def watermark_at_or_before(self, lsn: int) -> Watermark | None:
        with self._lock:
            rows = list(
                self._db.query(
                    "SELECT * FROM watermarks WHERE lsn <= ? ORDER BY lsn DESC LIMIT 1", [lsn]
                )
            )
        return _watermark(rows[0]) if rows else None

    def watermarks(self) -> list[Watermark]:
        """The kept history, oldest first."""
        with self._lock:
            rows = list(self._db.query("SELECT * FROM watermarks ORDER BY lsn"))
        return [_watermark(row) for row in rows]

    # ---- meta ----------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            rows = list(self._db.query("SELECT value FROM meta WHERE key = ?", [key]))
        return cast(str, rows[0]["value"]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._lock, self._transaction():
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [key, value])

    # ---- internals -------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Database]:
        """Commits on success, rolls back on error (a nested one is a savepoint).

        The outermost one begins IMMEDIATE: it takes the write lock first, waiting up to
        `BUSY_TIMEOUT` for another process (`streambed resync` writes a request while
        `streambed run` holds the store). A deferred transaction that read before the other
        process wrote could not take the lock afterwards: in WAL mode SQLite fails it at once
        with "database is locked" instead of waiting."""
        conn = self._db.conn
        if conn.in_transaction:
            with self._db.atomic():
                yield self._db
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            if self._db.conn.in_transaction:  # an error may have ended it already
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _create(self) -> None:
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS tables ("
            " schema TEXT NOT NULL, name TEXT NOT NULL, relation_id INTEGER NOT NULL,"
            " status TEXT NOT NULL CHECK (status IN ('pending', 'copying', 'ready')),"
            " frontier_lsn INTEGER, metadata_location TEXT, updated_at TEXT NOT NULL,"
            " PRIMARY KEY (schema, name))"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS watermarks ("
            " lsn INTEGER PRIMARY KEY, committed_at TEXT NOT NULL, tables TEXT NOT NULL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS copies ("
            " schema TEXT NOT NULL, name TEXT NOT NULL, run_id TEXT NOT NULL,"
            " output_dir TEXT NOT NULL, seam_lsn INTEGER NOT NULL, started_at TEXT NOT NULL,"
            " PRIMARY KEY (schema, name))"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS resync_requests ("
            " schema TEXT NOT NULL, name TEXT NOT NULL, requested_at TEXT NOT NULL,"
            " PRIMARY KEY (schema, name))"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS memberships ("
            " schema TEXT NOT NULL, name TEXT NOT NULL, rows TEXT NOT NULL,"
            " PRIMARY KEY (schema, name))"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS forgotten ("
            " schema TEXT NOT NULL, name TEXT NOT NULL, forgotten_at TEXT NOT NULL,"
            " PRIMARY KEY (schema, name))"
        )
        self._db.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
            [SCHEMA_VERSION],
        )
        rows = list(self._db.query("SELECT value FROM meta WHERE key = 'schema_version'"))
        version = rows[0]["value"]
        if version != SCHEMA_VERSION:
            raise StateError(
                f"{self.path} has state schema version {version}, this streambed understands "
                f"{SCHEMA_VERSION}: use the streambed version that wrote it, or move the file "
                "away (streambed rebuilds it from the lake)"
            )

    def _require(self, schema: str, name: str) -> TableState:
        rows = list(
            self._db.query("SELECT * FROM tables WHERE schema = ? AND name = ?", [schema, name])
        )
        if not rows:
            raise StateError(
                f"{schema}.{name} is not registered in the state store; this is a bug in "
                "streambed (tables are registered before they are copied)"
            )
        return _table_state(rows[0])

    def _write_frontier(self, schema: str, name: str, lsn: int, metadata_location: str) -> None:
        self._db.execute(
            "UPDATE tables SET frontier_lsn = ?, metadata_location = ?, updated_at = ? "
            "WHERE schema = ? AND name = ?",
            [lsn, metadata_location, _now(), schema, name],
        )

    def _latest_watermark(self) -> Watermark | None:
        rows = list(self._db.query("SELECT * FROM watermarks ORDER BY lsn DESC LIMIT 1"))
        return _watermark(rows[0]) if rows else None


def _table_state(row: Mapping[str, Any]) -> TableState:
    return TableState(
        schema=row["schema"],
        name=row["name"],
        relation_id=row["relation_id"],
        status=row["status"],
        frontier_lsn=row["frontier_lsn"],
        metadata_location=row["metadata_location"],
        updated_at=row["updated_at"],
    )


def _watermark(row: Mapping[str, Any]) -> Watermark:
    return Watermark(
        lsn=row["lsn"],
        committed_at=row["committed_at"],
        tables=MappingProxyType(json.loads(row["tables"])),
    )
