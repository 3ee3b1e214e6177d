"""The database side of the query server: replicated Iceberg tables in an embedded DuckDB.

`LakeDatabase` owns one in-memory DuckDB with the iceberg extension loaded offline. Every
replicated table is a view `<schema>.<table>` over `iceberg_scan('<metadata location>')`.
`refresh()` replaces all views, and the pg_catalog rows describing them, in one DuckDB
transaction built from one `ServedWatermark`, so a query binds either the old set or the new set,
never half of each (consistent reads across tables). A query keeps the views it bound.

Each client session gets a `DbSession` (its own DuckDB cursor). `DbSession.execute` takes
one statement (Postgres SQL, `$n` parameters with Python values) and returns a
`QueryResult`: Postgres column descriptions and a stream of Arrow record batches. It knows
nothing about sockets; the wire layer encodes what it returns.

After setup the database is locked: external access only to the warehouse, configuration
locked, and every statement that is not a read is refused before DuckDB sees it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb
import pglast
import pyarrow as pa
from pglast import ast, enums

from streambed.core.config import Settings
from streambed.lake.declared import SourceFacts, facts_of
from streambed.server import (
    catalog,
    cursors,
    extract,
    guard,
    keywords,
    numeric,
    origins,
    pgtypes,
    prepared,
    redact,
    rewrite,
    select_list,
    sqlparse,
    timetravel,
    vectors,
)
from streambed.server.extensions import load_extensions, offline_config
from streambed.server.version import SERVER_VERSION, SERVER_VERSION_NUM, version_string
from streambed.storage.s3 import S3Access

log = logging.getLogger(__name__)


# ---- the boundary with the pipeline ------------------------------------------------------


@dataclass(frozen=True)
class ServedWatermark:
    """A consistent cut of the lake: every table at the snapshot committed for `lsn`.

    `tables` maps (source schema, table) to the exact Iceberg metadata location.
    `primary_keys` is optional; when a table is missing from it, the key is read from the
    Iceberg table's identifier fields.
    """

    lsn: int
    tables: Mapping[tuple[str, str], str]
    primary_keys: Mapping[tuple[str, str], tuple[str, ...]] | None = None


class SnapshotProvider(Protocol):
    def latest(self) -> ServedWatermark | None:
        """The newest committed watermark, or None before the first commit."""
        ...


@dataclass(frozen=True)
class DatabaseSettings:
    """What the query database needs from the configuration."""

    warehouse: str  # file:///abs/path, /abs/path or s3://bucket/prefix
    database_name: str = "streambed"
    statement_timeout: float = 0.0  # seconds; 0 = none (sessions may SET their own)
    batch_rows: int = 65_536
    memory_limit: str = ""
    threads: int = 0
    s3: S3Access = field(default_factory=S3Access)
    extra_allowed_paths: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> DatabaseSettings:
        values: dict[str, Any] = {
            "warehouse": settings.warehouse_uri,
            "s3": S3Access.from_settings(settings),
            "statement_timeout": settings.query_statement_timeout,
        }
        values.update(overrides)
        return cls(**values)

    @property
    def warehouse_path(self) -> str:
        """The warehouse as DuckDB addresses it: a local directory or an s3:// prefix."""
        return self.warehouse.removeprefix("file://")  # not percent-encoded

    @property
    def pyiceberg_properties(self) -> dict[str, str]:
        return self.s3.fileio_properties()


# ---- results and errors ------------------------------------------------------------------


class QueryError(Exception):
    """An error to report to the client as an ErrorResponse with this SQLSTATE."""

    def __init__(
        self,
        message: str,
        sqlstate: str = "XX000",
        *,
        hint: str | None = None,
        position: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.hint = hint
        self.position = position  # 1-based character offset in the statement, as Postgres

    @property
    def severity(self) -> str:
        return "FATAL" if self.sqlstate.startswith("57P") else "ERROR"


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type_oid: int
    typmod: int
    type_name: str
    pg_type: pgtypes.PgType
    table_oid: int = 0  # a column taken straight from a table: its OID and column number
    column_number: int = 0

    @classmethod
    def of(cls, name: str, pg_type: pgtypes.PgType) -> ColumnInfo:
        return cls(name, pg_type.oid, pg_type.typmod, pg_type.name, pg_type)

    def from_table(self, origin: origins.ColumnOrigin, duckdb_type: str) -> ColumnInfo:
        """This column as taken straight from a table column: its table and number, and
        the declared type when the table column's DuckDB type is this column's."""
        pg_type = self.pg_type
        if origin.pg_type is not None and origin.stored_type == duckdb_type:
            pg_type = origin.pg_type
        return ColumnInfo(
            self.name, pg_type.oid, pg_type.typmod, pg_type.name, pg_type,
            origin.table_oid, origin.column_number,
        )  # fmt: skip


class QueryResult:
    """The outcome of one statement.

    `columns` is empty for statements that return no rows (SET, BEGIN, ...); iterate
    (or call `batches()`) to stream the rows; `command_tag` is final once the batches are
    exhausted (e.g. "SELECT 3"). `close()` releases the result early.
    """

    def __init__(
        self,
        columns: list[ColumnInfo],
        batches: Iterator[pa.RecordBatch] | None,
        tag: str,
        on_close: Any = None,
    ) -> None:
        self.columns = columns
        self._batches = batches
        self._tag = tag
        self._rows = 0
        self._on_close = on_close
        self._closed = batches is None

    @property
    def returns_rows(self) -> bool:
        return bool(self.columns)

    @property
    def row_count(self) -> int:
        return self._rows

    @property
    def command_tag(self) -> str:
        return f"{self._tag} {self._rows}" if self._tag in ("SELECT", "FETCH") else self._tag

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self._batches is None:
            return
        try:
            for batch in self._batches:
                self._rows += batch.num_rows
                yield batch
        finally:
            self.close()

    __iter__ = batches

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None:
            self._on_close()

    def fetch_all(self) -> pa.Table:
        """All rows as one Arrow table (tests and small results)."""
        schema = pa.schema([pa.field(c.name, pa.null()) for c in self.columns])
        batches = list(self.batches())
        if not batches:
            return schema.empty_table()
        return pa.Table.from_batches(batches)

    def rows(self) -> list[tuple[Any, ...]]:
        """All rows as Python values (numeric sent as text: Decimal)."""
        table = self.fetch_all()
        values = []
        for info, col in zip(self.columns, table.columns, strict=False):
            items = col.to_pylist()
            if info.type_oid == pgtypes.NUMERIC.oid and pa.types.is_string(col.type):
                items = [None if v is None else Decimal(v) for v in items]
            values.append(items)
        return list(zip(*values, strict=True)) if table.num_columns else []


# ---- error mapping -----------------------------------------------------------------------

_ERROR_STATES: list[tuple[type[BaseException], str]] = [
    (duckdb.ParserException, "42601"),
    (duckdb.InterruptException, "57014"),
    (duckdb.PermissionException, "42501"),
    (duckdb.ConversionException, "22P02"),
    (duckdb.OutOfRangeException, "22003"),
    (duckdb.NotImplementedException, "0A000"),
    (duckdb.TransactionException, "25000"),
    (duckdb.OutOfMemoryException, "53200"),
    (duckdb.IOException, "58030"),
    (duckdb.InvalidInputException, "22023"),
]


def _clean_message(text: str) -> str:
    text = re.sub(r"^[A-Za-z ]+ Error: ", "", text.strip())
    return text.split("\n\nLINE ")[0].split("\nLINE ")[0].strip()


def map_duckdb_error(error: BaseException) -> QueryError:
    raw = str(error)
    message = _clean_message(raw)
    lowered = message.lower()
    if "division by zero" in lowered:
        return QueryError("division by zero", "22012")
    if "out of range for the destination type int64" in lowered:
        return QueryError("bigint out of range", "22003")  # e.g. sum() of int4 past 2^63
    if isinstance(error, duckdb.CatalogException):
        if re.search(r"(table|view) with name .* does not exist", lowered):
            name = re.search(r"with name (\S+) does not exist", message)
            relation = name.group(1) if name else "?"
            return QueryError(f'relation "{relation}" does not exist', "42P01")
        if "function with name" in lowered or "macro function" in lowered:
            return QueryError(message, "42883")
        if "schema" in lowered and "does not exist" in lowered:
            return QueryError(message, "3F000")
        return QueryError(message, "42704")
    if isinstance(error, duckdb.BinderException):
        if "referenced column" in lowered or ("column" in lowered and "not found" in lowered):
            return QueryError(message, "42703")
        if "no function matches" in lowered:
            return QueryError(message, "42883")
        if "must appear in the group by" in lowered:
            return QueryError(message, "42803")
        return QueryError(message, "42P18" if "parameter" in lowered else "42804")
    for cls, state in _ERROR_STATES:
        if isinstance(error, cls):
            return QueryError(message, state)
    return QueryError(message, "XX000")


# ---- statement classification ------------------------------------------------------------

READ_ONLY_MESSAGE = guard.READ_ONLY_MESSAGE

_TX_TAGS = {
    enums.TransactionStmtKind.TRANS_STMT_BEGIN: "BEGIN",
    enums.TransactionStmtKind.TRANS_STMT_START: "BEGIN",
    enums.TransactionStmtKind.TRANS_STMT_COMMIT: "COMMIT",
    enums.TransactionStmtKind.TRANS_STMT_ROLLBACK: "ROLLBACK",
    enums.TransactionStmtKind.TRANS_STMT_SAVEPOINT: "SAVEPOINT",
    enums.TransactionStmtKind.TRANS_STMT_RELEASE: "RELEASE",
    enums.TransactionStmtKind.TRANS_STMT_ROLLBACK_TO: "ROLLBACK",
    enums.TransactionStmtKind.TRANS_STMT_PREPARE: "PREPARE TRANSACTION",
    enums.TransactionStmtKind.TRANS_STMT_COMMIT_PREPARED: "COMMIT PREPARED",
    enums.TransactionStmtKind.TRANS_STMT_ROLLBACK_PREPARED: "ROLLBACK PREPARED",
}

# Session settings a client may SET; value = default shown by SHOW.
DEFAULT_SETTINGS: dict[str, str] = {
    "application_name": "",
    "bytea_output": "hex",
    "client_encoding": "UTF8",
    "client_min_messages": "notice",
    "datestyle": "ISO, MDY",
    "default_transaction_isolation": "read committed",
    "default_table_access_method": "heap",
    "default_transaction_read_only": "on",
    "extra_float_digits": "1",
    "idle_in_transaction_session_timeout": "0",
    "integer_datetimes": "on",
    "intervalstyle": "postgres",
    "is_superuser": "off",
    "jit": "off",
    "lc_messages": "C.UTF-8",
    "lc_monetary": "C.UTF-8",
    "lc_numeric": "C.UTF-8",
    "lc_time": "C.UTF-8",
    "lock_timeout": "0",
    "max_identifier_length": "63",
    "search_path": '"$user", public',
    "server_encoding": "UTF8",
    "server_version": SERVER_VERSION,
    "server_version_num": SERVER_VERSION_NUM,
    "standard_conforming_strings": "on",
    "statement_timeout": "0",
    "timezone": "UTC",
    "transaction_isolation": "repeatable read",
    "transaction_read_only": "on",
    "row_security": "on",
    "geqo": "on",
    "work_mem": "4MB",
    "session_authorization": "streambed",
}
_READ_ONLY_SETTINGS = {
    "server_version", "server_version_num", "server_encoding", "integer_datetimes",
    "max_identifier_length", "is_superuser", "transaction_read_only", "session_authorization",
}  # fmt: skip
# Names shown to clients in their original case.
_DISPLAY_NAMES = {
    "datestyle": "DateStyle",
    "timezone": "TimeZone",
    "intervalstyle": "IntervalStyle",
}
# Settings the wire layer reports in ParameterStatus at startup and after SET.
REPORTED_SETTINGS = (
    "application_name", "client_encoding", "datestyle", "default_transaction_read_only",
    "integer_datetimes", "intervalstyle", "is_superuser", "server_encoding", "server_version",
    "session_authorization", "standard_conforming_strings", "timezone",
)  # fmt: skip


_ABORTED_MESSAGE = "current transaction is aborted, commands ignored until end of transaction block"


def _quotient_texts(operands: pa.Array) -> pa.Array:
    """Postgres's text of the quotients of an exact division item the query returned as
    its operands (`numeric.OPERANDS_FORM`)."""
    try:
        return numeric.operand_texts(operands)
    except ValueError as e:
        if "division by zero" in str(e):
            raise QueryError("division by zero", "22012") from e
        raise


def _parse_duration(text: str) -> float:
    """statement_timeout values: '5000' (ms), '5s', '1min', '250ms', '0'."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|h|d)?\s*", text)
    if not match:
        raise QueryError(f'invalid value for parameter "statement_timeout": "{text}"', "22023")
    number = float(match.group(1))
    unit = match.group(2) or "ms"
    return number * {"ms": 0.001, "s": 1, "min": 60, "h": 3600, "d": 86400}[unit]


def _setting_value(node: ast.VariableSetStmt) -> str:
    parts: list[str] = []
    for arg in node.args or ():
        if isinstance(arg, ast.A_Const):
            value = arg.val
            if isinstance(value, ast.String):
                parts.append(value.sval or "")
            elif isinstance(value, ast.Integer):
                parts.append(str(value.ival))
            elif isinstance(value, ast.Float):
                parts.append(str(value.fval))
            elif isinstance(value, ast.Boolean):
                parts.append("on" if value.boolval else "off")
        elif isinstance(arg, ast.TypeCast) and isinstance(arg.arg, ast.A_Const):
            inner = arg.arg.val
            parts.append(str(getattr(inner, "sval", getattr(inner, "ival", ""))))
        else:
            parts.append(str(arg))
    return ", ".join(parts)


# ---- the database ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Generation:
    watermark: ServedWatermark | None
    tables: Mapping[tuple[str, str], catalog.CatalogTable]
    schemas: frozenset[str]


@dataclass(frozen=True)
class _Shape:
    """What a table's metadata file says of its columns: the key, the required columns,
    and which schema of which table they belong to (table uuid, Iceberg schema id)."""

    keys: tuple[str, ...]
    required: frozenset[str]
    schema_key: tuple[str, int]
    facts: SourceFacts = field(default_factory=SourceFacts)


class LakeDatabase:
    """The embedded DuckDB serving the lake. Thread-safe; one per process."""

    def __init__(self, settings: DatabaseSettings, snapshots: SnapshotProvider) -> None:
        self.settings = settings
        self._snapshots = snapshots
        self._refresh_lock = threading.Lock()
        self._scratch = tempfile.TemporaryDirectory(prefix="streambed-duckdb-")
        config: dict[str, str | bool | int | float | list[str]] = dict(
            offline_config(str(Path(self._scratch.name) / "extensions"))
        )
        if settings.memory_limit:
            config["memory_limit"] = settings.memory_limit
        if settings.threads:
            config["threads"] = settings.threads
        self._conn = duckdb.connect(":memory:", config=config)
        self.redactor = redact.Redactor(
            settings.warehouse_path,
            [self._scratch.name, *settings.extra_allowed_paths],
            [settings.s3.access_key_id, settings.s3.secret_access_key],
        )
        self._metadata_cache: dict[str, _Shape] = {}
        # A view's (name, DuckDB type) columns, by table uuid and Iceberg schema id: a commit
        # that adds rows keeps its table's schema, and is not described again.
        self._columns_cache: dict[tuple[str, int], tuple[tuple[str, str], ...]] = {}
        self._snapshot_cache: dict[str, list[timetravel.SnapshotInfo]] = {}
        self._generation = _Generation(None, {}, frozenset())
        self.generation_number = 0  # counts the refreshes that changed what is served
        self._catalog_columns: dict[str, origins.Columns] = {}
        try:
            self._setup()
        except Exception:
            self._conn.close()
            self._scratch.cleanup()
            raise

    def _setup(self) -> None:
        conn = self._conn
        load_extensions(conn)
        conn.execute("SET TimeZone = 'UTC'")
        # Postgres semantics where DuckDB's defaults differ: int / int is integer division,
        # and NULLs sort last ascending, first descending. Global, then locked.
        conn.execute("SET GLOBAL integer_division = true")
        conn.execute("SET GLOBAL default_null_order = 'nulls_last_on_asc_first_on_desc'")
        s = self.settings
        if s.warehouse_path.startswith("s3://"):
            conn.execute(s.s3.duckdb_secret("streambed_s3"))
        catalog.install(conn, s.database_name)
        numeric.install(conn)
        for sql in extract.MACROS_SQL:
            conn.execute(sql)
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {timetravel.SCHEMA}")
        conn.execute("CREATE SCHEMA IF NOT EXISTS public")
        allowed = [s.warehouse_path.rstrip("/") + "/", *s.extra_allowed_paths]
        listed = ", ".join("'" + p.replace("'", "''") + "'" for p in allowed)
        conn.execute(f"SET allowed_directories = [{listed}]")
        conn.execute("SET enable_external_access = false")
        conn.execute("SET allow_community_extensions = false")
        # every macro streambed made (catalog functions included) is on the allow-list
        self.macros = guard.Macros.of(conn.execute(guard.MACROS_QUERY).fetchall())
        for name, vector_columns in vectors.VECTOR_COLUMNS.items():
            described = conn.execute(f"DESCRIBE {catalog.SCHEMA}.{name}").fetchall()
            relid = catalog.SYSTEM_RELATIONS.get(name, 0)
            self._catalog_columns[name] = [
                (
                    str(row[0]),
                    origins.ColumnOrigin(
                        relid, number, vector_columns.get(str(row[0])), str(row[1])
                    ),
                )
                for number, row in enumerate(described, start=1)
            ]
        # No lock_configuration: it would also lock each session's TimeZone, which DuckDB's
        # ICU functions (date_trunc, ::date, extract on timestamptz) compute in. The sandbox
        # holds without it: DuckDB refuses to turn external access, allowed_directories,
        # community or unsigned extensions back on at runtime, and clients cannot SET
        # DuckDB settings at all (every SET is checked against Postgres session settings).

    # -- refresh --------------------------------------------------------------------------

    @property
    def watermark(self) -> ServedWatermark | None:
        return self._generation.watermark

    def refresh(self) -> bool:
        """Switch every view to the newest watermark, atomically. Returns True if it changed.

        Cheap and idempotent when nothing changed. Queries already running keep the views
        they bound; queries that start after the commit see the new watermark.
        """
        with self._refresh_lock:
            latest = self._snapshots.latest()
            current = self._generation.watermark
            if latest is None or latest == current:
                return False
            if current is not None and latest.lsn < current.lsn:
                log.warning(
                    "refresh ignored an older watermark lsn=%d current=%d", latest.lsn, current.lsn
                )
                return False
            self._apply(latest)
            return True

    def _table_metadata(self, location: str) -> _Shape:
        cached = self._metadata_cache.get(location)
        if cached is None:
            from pyiceberg.table import StaticTable

            table = StaticTable.from_metadata(location, self.settings.pyiceberg_properties)
            schema = table.schema()
            keys = tuple(schema.find_column_name(i) or "" for i in schema.identifier_field_ids)
            required = frozenset(f.name for f in schema.fields if f.required)
            schema_key = (str(table.metadata.table_uuid), schema.schema_id)
            facts = facts_of(table.metadata.properties)
            cached = _Shape(tuple(k for k in keys if k), required, schema_key, facts)
            self._metadata_cache[location] = cached
        return cached

    def _apply(self, watermark: ServedWatermark) -> None:
        old = self._generation
        cursor = self._conn.cursor()
        try:
            cursor.execute("BEGIN TRANSACTION")
            schemas = set(old.schemas)
            infos: dict[tuple[str, str], catalog.CatalogTable] = {}
            shapes: set[tuple[str, int]] = set()
            for (schema, table), location in sorted(watermark.tables.items()):
                if schema not in schemas:
                    cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {_ident(schema)}")
                    schemas.add(schema)
                qualified = f"{_ident(schema)}.{_ident(table)}"
                escaped = location.replace("'", "''")
                previous = old.watermark.tables.get((schema, table)) if old.watermark else None
                if previous != location:
                    cursor.execute(
                        f"CREATE OR REPLACE VIEW {qualified} AS "
                        f"SELECT * FROM iceberg_scan('{escaped}')"
                    )
                shape = self._table_metadata(location)
                shapes.add(shape.schema_key)
                columns = self._columns_cache.get(shape.schema_key)
                if columns is None:
                    described = cursor.execute(f"DESCRIBE {qualified}").fetchall()
                    columns = tuple((str(r[0]), str(r[1])) for r in described)
                    self._columns_cache[shape.schema_key] = columns
                pk: tuple[str, ...] | None = None
                if watermark.primary_keys is not None:
                    pk = watermark.primary_keys.get((schema, table))
                keys, required = shape.keys, shape.required
                infos[(schema, table)] = catalog.CatalogTable(
                    schema,
                    table,
                    _column_defs(columns, required, shape.facts),
                    pk if pk is not None else keys,
                    shape.facts.foreign_keys,
                )
            if old.watermark is not None:
                for schema, table in old.watermark.tables:
                    if (schema, table) not in watermark.tables:
                        cursor.execute(f"DROP VIEW IF EXISTS {_ident(schema)}.{_ident(table)}")
            if infos != old.tables:
                # Only when a table, column or key came or went: a commit that changed no
                # table's shape (most of them) leaves the catalog as it is.
                catalog.rebuild(cursor, list(infos.values()), self.settings.database_name)
            cursor.execute("COMMIT")
        except Exception:
            with contextlib.suppress(duckdb.Error):
                cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()
        live = set(watermark.tables.values())
        for cache in (self._metadata_cache, self._snapshot_cache):
            for key in [k for k in cache if k not in live]:
                del cache[key]
        for gone in [k for k in self._columns_cache if k not in shapes]:
            del self._columns_cache[gone]
        self._generation = _Generation(watermark, infos, frozenset(schemas))
        self.generation_number += 1
        log.info("query views refreshed lsn=%d tables=%d", watermark.lsn, len(infos))

    # -- time travel ----------------------------------------------------------------------

    def resolve_time_travel(self, function: str, table: str, value: Any) -> tuple[str, int]:
        """(metadata location, snapshot id) for `streambed.<function>(table, value)`."""
        generation = self._generation
        key = timetravel.split_table_name(table)
        location = generation.watermark.tables.get(key) if generation.watermark else None
        if location is None:
            raise timetravel.TimeTravelError(
                f'relation "{key[0]}.{key[1]}" does not exist (streambed.{function} takes '
                f"'schema.table' of a replicated table)",
                "42P01",
            )
        snapshots = self._snapshot_cache.get(location)
        if snapshots is None:
            snapshots = timetravel.load_snapshots(location, self.settings.pyiceberg_properties)
            self._snapshot_cache[location] = snapshots
        return location, timetravel.resolve_snapshot(function, table, snapshots, value)

    # -- sessions ---------------------------------------------------------------------------

    def session(self, user: str = "streambed", database: str | None = None) -> DbSession:
        return DbSession(self, self._conn.cursor(), user, database or self.settings.database_name)

    @property
    def schemas(self) -> frozenset[str]:
        return self._generation.schemas | {"public"}

    def table_columns(
        self, schema: str | None, name: str, path: Sequence[str]
    ) -> origins.Columns | None:
        """The columns of the relation a query names `schema.name` (schema None: found on
        `path`), with where each comes from (`streambed.server.origins`); None when it is
        not a replicated table or a catalog relation with vector columns."""
        if schema in (None, "pg_catalog") and name in self._catalog_columns:
            return self._catalog_columns[name]
        if schema is None and name in catalog.CATALOG_RELATIONS:
            return None
        tables = self._generation.tables
        found = None
        for candidate in [schema] if schema is not None else path:
            found = tables.get((candidate, name))
            if found is not None:
                break
        if found is None:
            return None
        oid = found.oid
        return [
            (c.name, origins.ColumnOrigin(oid, number, c.declared, c.duckdb_type))
            for number, c in enumerate(found.columns, start=1)
        ]

    def serves(self, schema: str, name: str) -> bool:
        """Whether `schema.name` is a replicated table the query views hold now."""
        return (schema, name) in self._generation.tables

    def close(self) -> None:
        self._conn.close()
        self._scratch.cleanup()

    def __enter__(self) -> LakeDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _column_defs(
    columns: Sequence[tuple[str, str]], required: frozenset[str], facts: SourceFacts
) -> tuple[catalog.ColumnDef, ...]:
    """The catalog's columns of a table: DuckDB's (name, type), with the source's declared
    type and NOT NULL where recorded (`streambed.lake.declared`)."""
    declared = {c.name: c for c in facts.columns}
    out = []
    for name, duckdb_type in columns:
        source = declared.get(name)
        pg_type = None
        if source is not None:
            pg_type = pgtypes.declared_type(source.type_oid, source.typmod, duckdb_type)
        not_null = name in required or (source is not None and source.not_null)
        out.append(catalog.ColumnDef(name, duckdb_type, not_null, pg_type))
    return tuple(out)


def syntax_error(error: pglast.parser.ParseError) -> QueryError:
    """Postgres's syntax error: its message and 1-based character position."""
    message = str(error.args[0]) if error.args else "syntax error"
    location = error.args[1] if len(error.args) > 1 else None
    position = None
    if isinstance(location, int) and location >= 0:
        position = location + 1  # pglast counts characters from 0
    return QueryError(message, "42601", position=position)


class DbSession:
    """One client session: its own DuckDB cursor, settings and transaction state."""

    def __init__(
        self, db: LakeDatabase, cursor: duckdb.DuckDBPyConnection, user: str, database: str
    ) -> None:
        self._db = db
        self._cursor = cursor
        self.user = user
        self.database = database
        self.settings: dict[str, str] = dict(DEFAULT_SETTINGS)
        self.settings["session_authorization"] = user
        if db.settings.statement_timeout:
            self.settings["statement_timeout"] = str(int(db.settings.statement_timeout * 1000))
        self._status = "I"  # I idle, T in transaction, E failed transaction
        self._lock = threading.Lock()
        self._timed_out = False
        self._canceled = False
        self._timer: threading.Timer | None = None
        self._open: QueryResult | None = None
        self._applied: tuple[str, str] | None = None  # (search_path, TimeZone) on _cursor
        self._active = cursor  # the DuckDB connection running the current statement
        self._cursors: dict[str, cursors.SqlCursor] = {}
        self._savepoints: list[str] = []  # of the open transaction block, oldest first
        # the result columns taken straight from tables, of the last statement prepared
        self._origins: list[origins.ColumnOrigin | None] | None = None
        self._local_settings: dict[str, str] = {}  # set_config(..., true): values to restore
        self._prepared = prepared.PreparedCache()
        # the statement being prepared used time travel or set_config(): not to be cached
        self._resolved_outside = False

    # -- state the wire layer reports -------------------------------------------------------

    @property
    def transaction_status(self) -> str:
        """'I' idle, 'T' in a transaction block, 'E' in a failed transaction block."""
        return self._status

    @property
    def timezone(self) -> str:
        return self.settings["timezone"]

    def parameter_status(self) -> dict[str, str]:
        """Settings to send as ParameterStatus at startup."""
        return {_DISPLAY_NAMES.get(k, k): self.settings[k] for k in REPORTED_SETTINGS}

    @property
    def statement_timeout(self) -> float:
        return _parse_duration(self.settings["statement_timeout"])

    # -- cancel ------------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Cancel the running statement (CancelRequest). Safe from any thread."""
        self._canceled = True
        with contextlib.suppress(duckdb.Error):
            self._active.interrupt()

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
        self._close_cursors(lambda c: True)
        with contextlib.suppress(duckdb.Error):
            self._cursor.close()

    # -- execution ---------------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence[object] | None = None) -> QueryResult:
        """Run one statement. Raises QueryError (with SQLSTATE) on failure."""
        if self._open is not None:
            self._open.close()
        self._origins = None
        try:
            return self._execute(sql, list(params or ()))
        except QueryError as e:
            self._fail(e)
            e.message = self._db.redactor.text(e.message)
            raise
        except duckdb.Error as e:
            error = self._cancel_error() or map_duckdb_error(e)
            self._fail(error)
            error.message = self._db.redactor.text(error.message)
            raise error from e
        except Exception as e:  # e.g. pyiceberg reading a table's snapshots for time travel
            log.warning("statement failed", extra={"fields": {"error": repr(e)}})
            text = self._db.redactor.text(_clean_message(str(e)) or type(e).__name__)
            error = QueryError(text, "XX000")
            self._fail(error)
            raise error from e

    def _fail(self, error: QueryError) -> None:
        if self._status == "T":
            # the failed (sub)transaction's cursors; those of enclosing savepoints stay
            level = len(self._savepoints)
            self._close_cursors(lambda c: c.in_transaction and c.savepoint_level >= level)
            self._status = "E"
            with contextlib.suppress(duckdb.Error):
                self._cursor.execute("ROLLBACK")

    def _cancel_error(self) -> QueryError | None:
        if self._timed_out:
            return QueryError("canceling statement due to statement timeout", "57014")
        if self._canceled:
            return QueryError("canceling statement due to user request", "57014")
        return None

    def _execute(self, sql: str, params: list[object]) -> QueryResult:
        if not params:
            hit = self._prepared.get(self._cache_key(sql))
            if hit is not None:
                if self._status == "E":
                    raise QueryError(_ABORTED_MESSAGE, "25P02")
                self._origins = None if hit.origins is None else list(hit.origins)
                return self._run(hit.text, [], list(hit.names), hit.tag)
        try:
            statements = sqlparse.parse_sql(sql)
        except pglast.parser.ParseError as e:
            raise syntax_error(e) from e
        if len(statements) != 1:
            if not statements:
                return QueryResult([], None, "EMPTY")
            raise QueryError(
                "cannot run several statements at once here; split them first", "42601"
            )
        stmt = statements[0].stmt
        if isinstance(stmt, ast.TransactionStmt):
            return self._transaction(stmt)
        if self._status == "E":
            raise QueryError(_ABORTED_MESSAGE, "25P02")
        if isinstance(stmt, ast.VariableSetStmt):
            return self._set(stmt)
        if isinstance(stmt, ast.VariableShowStmt):
            return self._show(stmt.name or "")
        if isinstance(stmt, ast.DiscardStmt):
            return QueryResult([], None, "DISCARD ALL")
        if isinstance(stmt, ast.DeallocateStmt):
            return QueryResult([], None, "DEALLOCATE")
        if isinstance(stmt, ast.ListenStmt | ast.UnlistenStmt):
            return QueryResult(
                [], None, "UNLISTEN" if isinstance(stmt, ast.UnlistenStmt) else "LISTEN"
            )
        if isinstance(stmt, ast.ExplainStmt):
            self._check(stmt.query)
            return self._select(sql, stmt, params, tag="EXPLAIN")
        if isinstance(stmt, ast.SelectStmt):
            self._check(stmt)
            return self._select(sql, stmt, params, tag="SELECT")
        if isinstance(stmt, ast.DeclareCursorStmt):
            return self._declare(stmt, params)
        if isinstance(stmt, ast.FetchStmt):
            return self._fetch(stmt)
        if isinstance(stmt, ast.ClosePortalStmt):
            return self._close_cursor(stmt.portalname)
        if isinstance(stmt, ast.PrepareStmt | ast.ExecuteStmt):
            raise QueryError(
                "SQL-level PREPARE/EXECUTE is not supported; use the extended query protocol",
                "0A000",
            )
        raise QueryError(READ_ONLY_MESSAGE.format(what=guard.statement_name(stmt)), "25006")

    def _check(self, stmt: Any) -> None:
        """The allow-list, on the client's statement as parsed (before any rewrite)."""
        context = guard.Context(
            macros=self._db.macros,
            warehouse=self._db.settings.warehouse_path,
            database=self.database,
            search_path=tuple(self._search_path()),
            serves=self._db.serves,
        )
        try:
            guard.check_statement(stmt, context)
        except guard.GuardError as e:
            raise QueryError(e.message, e.sqlstate, hint=e.hint) from e

    # -- SELECT ------------------------------------------------------------------------------

    def _session_values(self, params: list[object]) -> rewrite.SessionValues:
        path = self._search_path()
        return rewrite.SessionValues(
            user=self.user,
            database=self.database,
            schema=path[0] if path else "public",
            search_path=tuple(path),
            version=version_string(),
            time_travel=self._time_travel,
            params=tuple(params),
            settings=dict(self.settings),
            set_setting=self._set_config,
        )

    def _time_travel(self, function: str, table: str, value: Any) -> tuple[str, int]:
        self._resolved_outside = True
        return self._db.resolve_time_travel(function, table, value)

    def _cache_key(self, sql: str) -> prepared.Key:
        return prepared.key(sql, self.settings, self._db.generation_number)

    def _select(self, sql: str, stmt: ast.Node, params: list[object], tag: str) -> QueryResult:
        """Prepare and run a SELECT or EXPLAIN (already checked); remember how it was
        prepared when nothing but the text, the settings and the lake decided it."""
        cache_key = self._cache_key(sql)
        self._resolved_outside = False
        text, bound, names = self._prepare_select(sql, stmt, params)
        origins = self._origins
        try:
            result = self._run(text, bound, names, tag)
        except duckdb.Error as e:
            if not numeric.raised_by_macros(e):
                raise
            # a type combination the exact-numeric macros do not resolve: run the query
            # with DuckDB's own avg() and division rather than fail it
            log.warning(
                "exact numeric rewrite failed, running with double precision",
                extra={"fields": {"error": str(e).splitlines()[0]}},
            )
            fresh = sqlparse.parse_sql(sql)[0].stmt
            assert fresh is not None
            text, bound, names = self._prepare_select(sql, fresh, params, exact_numeric=False)
            origins = self._origins
            result = self._run(text, bound, names, tag)
        if not params and not self._resolved_outside:
            kept = None if origins is None else tuple(origins)
            self._prepared.put(cache_key, prepared.PreparedSelect(text, tuple(names), kept, tag))
        return result

    def _prepare_select(
        self, sql: str | None, stmt: ast.Node, params: list[object], exact_numeric: bool = True
    ) -> tuple[str, list[object], list[str | None]]:
        """The DuckDB text of a parsed SELECT (rewritten only if needed), its parameters and
        the Postgres column names. `sql` None: print the statement from its parse tree."""
        names = rewrite.pg_column_names(stmt) if isinstance(stmt, ast.SelectStmt) else []
        path = self._search_path()
        self._origins = origins.result_origins(
            stmt, lambda schema, name: self._db.table_columns(schema, name, path)
        )
        select_list.name_reg_outputs(stmt)  # before the rewrite, after naming the columns
        if rewrite.needs_rewrite(stmt):
            try:
                text, kept = rewrite.rewrite(stmt, self._session_values(params), exact_numeric)
            except timetravel.TimeTravelError as e:
                raise QueryError(str(e), e.sqlstate) from e
            # arguments given as $n that the rewrite resolved into constants are gone
            params = [params[n - 1] for n in kept if n <= len(params)]
        else:
            text = sql if sql is not None else str(keywords.QuotingStream()(stmt))
        return text, params, names

    def _apply_settings(self, conn: duckdb.DuckDBPyConnection, applied: Any) -> tuple[str, str]:
        """Give a DuckDB connection the session's search_path and TimeZone (DuckDB computes
        date_trunc, ::date, extract on timestamptz in its TimeZone, like Postgres)."""
        path = ",".join([*self._search_path(), "main"])
        zone = self.settings["timezone"]
        wanted = (path, zone)
        if applied is None:
            name = self.database.replace("'", "''")
            conn.execute(f"SET VARIABLE {catalog.DATABASE_VARIABLE} = '{name}'")
        if applied is None or applied[0] != path:
            conn.execute(f"SET search_path = '{path}'")
        if applied is None or applied[1] != zone:
            try:
                conn.execute(f"SET TimeZone = '{zone.replace(chr(39), chr(39) * 2)}'")
            except duckdb.Error as e:
                # a zone Python knows and ICU does not: computed in UTC, still shown in it
                log.warning(
                    "time zone not known to duckdb",
                    extra={"fields": {"zone": zone, "error": str(e)}},
                )
        return wanted

    def _search_path(self) -> list[str]:
        existing = self._db.schemas
        result = []
        for item in self.settings["search_path"].split(","):
            name = item.strip().strip('"')
            if name == "$user":
                name = self.user
            if name in existing and name not in result:
                result.append(name)
        return result

    def _run(
        self, sql: str, params: list[object], names: list[str | None], tag: str
    ) -> QueryResult:
        self._applied = self._apply_settings(self._cursor, self._applied)
        self._run_on(self._cursor)
        self._start_timer()
        try:
            opened = self._open_reader(self._cursor, sql, params, names, redact=tag == "EXPLAIN")
        except Exception:
            self._stop_timer()
            raise
        if opened is None:
            self._stop_timer()
            return QueryResult([], None, tag)
        columns, batches = opened
        result = QueryResult(columns, batches, tag, on_close=self._stop_timer)
        self._open = result
        return result

    def _open_reader(
        self,
        conn: duckdb.DuckDBPyConnection,
        sql: str,
        params: list[object],
        names: list[str | None],
        *,
        redact: bool = False,
    ) -> tuple[list[ColumnInfo], Iterator[pa.RecordBatch]] | None:
        """Start `sql` on `conn`: Postgres column descriptions and the batch stream, or None
        for a statement without rows. `redact`: strip server paths from the rows (EXPLAIN)."""
        batch_rows = self._db.settings.batch_rows
        # execute() plans the query once and streams its result (the reader pulls batches as
        # they are sent; memory stays bounded); conn.sql() would bind it once to make a
        # relation and again to run it (about a tenth of a TPC-H query at SF0.1), and holds
        # the GIL while it gathers a parameterized result. No description: no rows.
        if params:
            conn.execute(sql, params)
        else:
            conn.execute(sql)
        # (stubs say description is never None)
        described: list[Any] | None = conn.description
        if described is None:
            return None
        description = described
        reader = conn.to_arrow_reader(batch_rows)
        actual = [str(d[0]) for d in description]
        renames = rewrite.rename_map(names, actual)
        final_names = [renames.get(i, n) for i, n in enumerate(actual)]
        columns = [
            ColumnInfo.of(name, pgtypes.pg_type_for_duckdb(str(d[1])))
            for name, d in zip(final_names, description, strict=True)
        ]
        found, self._origins = self._origins, None
        if found is not None and len(found) == len(columns):
            columns = [
                c if o is None else c.from_table(o, str(d[1]))
                for c, o, d in zip(columns, found, description, strict=True)
            ]
        # exact avg()/division items: send their text (numeric, Postgres's scale), computed
        # in the query or, from the operands it returns, here
        kinds = [str(d[1]) for d in description]
        texts = [i for i, kind in enumerate(kinds) if kind == pgtypes.NUMERIC_TEXT_TYPE]
        operands = [i for i, kind in enumerate(kinds) if pgtypes.is_numeric_operands(kind)]
        fields = [
            pa.field(final_names[i], pa.string())
            if i in texts or i in operands
            else f.with_name(final_names[i])
            for i, f in enumerate(reader.schema)
        ]
        schema = pa.schema(fields, metadata=reader.schema.metadata)
        rebuild = bool(renames) or bool(texts) or bool(operands)
        stream = self._stream(reader, schema, rebuild, texts, operands, redact)
        return columns, stream

    def _stream(
        self,
        reader: pa.RecordBatchReader,
        schema: pa.Schema,
        rebuild: bool,
        texts: list[int],
        operands: list[int],
        redact: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        try:
            while True:
                self._check_canceled()  # a timeout that fired while the caller sent rows
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except duckdb.Error as e:
                    raise self._cancel_error() or map_duckdb_error(e) from e
                except Exception as e:  # the Arrow reader raises OSError for an interrupt
                    cancel = self._cancel_error()
                    if cancel is not None:
                        raise cancel from e
                    raise QueryError(_clean_message(str(e)), "XX000") from e
                if rebuild:
                    arrays = list(batch.columns)
                    for i in texts:  # flatten() keeps the struct's NULLs
                        arrays[i] = arrays[i].flatten()[1]
                    for i in operands:
                        arrays[i] = _quotient_texts(arrays[i])
                    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
                yield self._db.redactor.batch(batch) if redact else batch
        except QueryError as error:
            self._fail(error)
            error.message = self._db.redactor.text(error.message)
            raise
        finally:
            self._stop_timer()
            reader.close()

    def _check_canceled(self) -> None:
        error = self._cancel_error()
        if error is not None:
            raise error

    def _run_on(self, connection: duckdb.DuckDBPyConnection) -> None:
        """The statement runs on `connection` (what cancel and the timeout interrupt)."""
        self._active = connection
        self._timed_out = False
        self._canceled = False

    def _start_timer(self) -> None:
        timeout = self.statement_timeout
        if timeout > 0:
            self._timer = threading.Timer(timeout, self._on_timeout)
            self._timer.daemon = True
            self._timer.start()

    def _on_timeout(self) -> None:
        self._timed_out = True
        with contextlib.suppress(duckdb.Error):
            self._active.interrupt()

    def _stop_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    # -- transactions ------------------------------------------------------------------------

    def _transaction(self, stmt: ast.TransactionStmt) -> QueryResult:
        kind = stmt.kind
        tag = _TX_TAGS.get(kind, "BEGIN") if kind is not None else "BEGIN"
        K = enums.TransactionStmtKind
        if kind in (K.TRANS_STMT_BEGIN, K.TRANS_STMT_START):
            if self._status == "I":
                self._cursor.execute("BEGIN TRANSACTION")
                self._status = "T"
            return QueryResult([], None, "BEGIN")
        if kind in (K.TRANS_STMT_COMMIT, K.TRANS_STMT_ROLLBACK):
            # the end of a block closes its cursors, except those WITH HOLD it committed
            committed = kind == K.TRANS_STMT_COMMIT and self._status == "T"
            self._close_cursors(lambda c: c.in_transaction and (not c.hold or not committed))
            for cursor in self._cursors.values():
                cursor.in_transaction = False
            if self._status == "T":
                with contextlib.suppress(duckdb.Error):
                    self._cursor.execute("ROLLBACK")
            failed = self._status == "E"
            self._status = "I"
            self._savepoints.clear()
            self.settings.update(self._local_settings)
            self._local_settings.clear()
            return QueryResult([], None, "ROLLBACK" if failed else tag)
        if kind in (K.TRANS_STMT_ROLLBACK_TO, K.TRANS_STMT_RELEASE):
            if self._status == "I":
                what = "RELEASE" if kind == K.TRANS_STMT_RELEASE else "ROLLBACK TO"
                raise QueryError(
                    f"{what} SAVEPOINT can only be used in transaction blocks", "25P01"
                )
            if self._status == "E" and kind == K.TRANS_STMT_RELEASE:
                raise QueryError(
                    "current transaction is aborted, commands ignored until end of "
                    "transaction block",
                    "25P02",
                )
            name = stmt.savepoint_name or ""
            if name not in self._savepoints:
                raise QueryError(f'savepoint "{name}" does not exist', "3B001")
            level = len(self._savepoints) - self._savepoints[::-1].index(name) - 1
            if kind == K.TRANS_STMT_RELEASE:
                # its cursors now belong to the enclosing (sub)transaction
                del self._savepoints[level:]
                for cursor in self._cursors.values():
                    cursor.savepoint_level = min(cursor.savepoint_level, level)
                return QueryResult([], None, tag)
            # ROLLBACK TO: the savepoint stays; cursors declared after it close
            del self._savepoints[level + 1 :]
            self._close_cursors(lambda c: c.in_transaction and c.savepoint_level > level)
            if self._status == "E":
                self._cursor.execute("BEGIN TRANSACTION")
                self._status = "T"
            return QueryResult([], None, "ROLLBACK")
        if kind == K.TRANS_STMT_SAVEPOINT:
            if self._status == "E":
                raise QueryError(
                    "current transaction is aborted, commands ignored until end of "
                    "transaction block",
                    "25P02",
                )
            if self._status == "I":
                raise QueryError(f"{tag} can only be used in transaction blocks", "25P01")
            self._savepoints.append(stmt.savepoint_name or "")
            return QueryResult([], None, tag)
        raise QueryError("two-phase commit is not supported on a read-only replica", "0A000")

    # -- cursors (DECLARE / FETCH / MOVE / CLOSE) -----------------------------------------

    def cursor_columns(self, name: str) -> list[ColumnInfo] | None:
        """The columns of a declared cursor (Describe Portal by the cursor's name, as
        psycopg's named cursors send), or None if there is no such cursor."""
        cursor = self._cursors.get(name)
        return None if cursor is None else list(cursor.columns)

    def _declare(self, stmt: ast.DeclareCursorStmt, params: list[object]) -> QueryResult:
        name = stmt.portalname or ""
        options = stmt.options or 0
        hold = bool(options & cursors.HOLD)
        if self._status == "I" and not hold:
            raise QueryError("DECLARE CURSOR can only be used in transaction blocks", "25P01")
        if options & cursors.BINARY:
            raise QueryError(
                "BINARY cursors are not supported; FETCH through the extended protocol with "
                "binary result formats instead",
                "0A000",
            )
        if name in self._cursors:
            raise QueryError(f'cursor "{name}" already exists', "42P03")
        query = stmt.query
        if not isinstance(query, ast.SelectStmt):
            raise QueryError("DECLARE CURSOR must be followed by a SELECT", "42601")
        self._check(query)
        text, params, names = self._prepare_select(None, query, params)
        # its own DuckDB connection: the session's next statements must not end its result
        conn = self._cursor.cursor()
        try:
            self._apply_settings(conn, None)
            self._run_on(conn)
            opened = self._open_reader(conn, text, params, names)
        except Exception:
            self._active = self._cursor
            conn.close()
            raise
        self._active = self._cursor
        if opened is None:
            conn.close()
            raise QueryError("DECLARE CURSOR must be followed by a SELECT", "42601")
        columns, batches = opened
        self._cursors[name] = cursors.SqlCursor(
            name,
            columns,
            batches,
            hold,
            in_transaction=self._status == "T",
            savepoint_level=len(self._savepoints),
            connection=conn,
            on_close=conn.close,
            scroll=bool(options & cursors.SCROLL),
        )
        return QueryResult([], None, "DECLARE CURSOR")

    def _named_cursor(self, name: str | None) -> cursors.SqlCursor:
        cursor = self._cursors.get(name or "")
        if cursor is None:
            raise QueryError(f'cursor "{name}" does not exist', "34000")
        return cursor

    def _fetch(self, stmt: ast.FetchStmt) -> QueryResult:
        cursor = self._named_cursor(stmt.portalname)
        if cursor.scroll:
            return self._scroll_fetch(cursor, stmt)
        try:
            skip, count = cursors.forward_count(stmt, cursor)
        except cursors.CursorError as e:
            raise QueryError(e.message, e.sqlstate) from e
        self._run_on(cursor.connection)
        if stmt.ismove:
            moved = cursor.skip(skip + count)
            return QueryResult([], None, f"MOVE {moved}")
        if skip:
            cursor.skip(skip)
        self._start_timer()
        return self._fetched(cursor, cursor.take(count))

    def _scroll_fetch(self, cursor: cursors.SqlCursor, stmt: ast.FetchStmt) -> QueryResult:
        self._run_on(cursor.connection)
        self._start_timer()
        try:
            batches = cursor.scroll_fetch(stmt)  # reads ahead as far as the move needs
        except BaseException:
            self._stop_timer()
            raise
        if stmt.ismove:
            self._stop_timer()
            return QueryResult([], None, f"MOVE {sum(b.num_rows for b in batches)}")
        return self._fetched(cursor, iter(batches))

    def _fetched(self, cursor: cursors.SqlCursor, batches: Iterator[pa.RecordBatch]) -> QueryResult:
        result = QueryResult(list(cursor.columns), batches, "FETCH", on_close=self._stop_timer)
        self._open = result
        return result

    def _close_cursor(self, name: str | None) -> QueryResult:
        if name is None:  # CLOSE ALL
            self._close_cursors(lambda c: True)
            return QueryResult([], None, "CLOSE CURSOR ALL")
        self._named_cursor(name).close()
        del self._cursors[name]
        return QueryResult([], None, "CLOSE CURSOR")

    def _close_cursors(self, which: Callable[[cursors.SqlCursor], bool]) -> None:
        for name, cursor in list(self._cursors.items()):
            if which(cursor):
                del self._cursors[name]
                cursor.close()

    # -- SET / SHOW --------------------------------------------------------------------------

    def _set(self, stmt: ast.VariableSetStmt) -> QueryResult:
        K = enums.VariableSetKind
        name = (stmt.name or "").lower()
        if (
            stmt.kind == K.VAR_SET_MULTI
            or name.startswith("transaction")
            or name in ("session characteristics",)
        ):
            return QueryResult([], None, "SET")  # SET TRANSACTION ... : read-only anyway
        if stmt.kind == K.VAR_RESET_ALL:
            self.settings.update(DEFAULT_SETTINGS)
            self.settings["session_authorization"] = self.user
            return QueryResult([], None, "RESET")
        if name == "timezone" and stmt.kind == K.VAR_SET_VALUE and stmt.args:
            arg = stmt.args[0]
            if isinstance(arg, ast.TypeCast):  # SET TIME ZONE INTERVAL '+02:00' HOUR TO MINUTE
                raise QueryError("SET TIME ZONE INTERVAL is not supported", "0A000")
        if name == "names":
            name = "client_encoding"
        if stmt.kind in (K.VAR_RESET, K.VAR_SET_DEFAULT):
            self._change_setting(name, None)
        else:
            self._change_setting(name, _setting_value(stmt))
        return QueryResult([], None, "RESET" if stmt.kind == K.VAR_RESET else "SET")

    def _set_config(self, name: str, value: str, is_local: bool) -> str:
        """set_config(): like SET (or SET LOCAL, which ends with the transaction block and
        outside one changes nothing); returns the value as SHOW would give it."""
        self._resolved_outside = True
        key = name.lower()
        if is_local and self._status == "I":
            return self._checked_setting(key, value)
        before = self.settings.get(key)
        self._change_setting(key, value)
        if is_local and before is not None:
            self._local_settings.setdefault(key, before)
        return self.settings[key]

    def _checked_setting(self, name: str, value: str) -> str:
        if name not in DEFAULT_SETTINGS or name in _READ_ONLY_SETTINGS:
            self._change_setting(name, value)  # raises the error SET gives
        return self._validate_setting(name, value)

    def _change_setting(self, name: str, value: str | None) -> None:
        """Set a session setting as SET does (`value` None: its default)."""
        if name not in DEFAULT_SETTINGS or name in _READ_ONLY_SETTINGS:
            if name in _READ_ONLY_SETTINGS:
                raise QueryError(f'parameter "{name}" cannot be changed', "55P02")
            raise QueryError(
                f'setting "{name}" cannot be changed on this read-only server '
                f"(only Postgres session settings such as search_path, TimeZone, "
                f"statement_timeout are accepted)",
                "42501",
            )
        if value is None:
            value = DEFAULT_SETTINGS[name]
        self.settings[name] = self._validate_setting(name, value)

    def _validate_setting(self, name: str, value: str) -> str:
        if name == "timezone":
            zone = value.strip()
            upper = zone.upper()
            if upper in ("UTC", "GMT", "Z", "ETC/UTC", "ZULU", "UCT"):
                return "UTC"
            if upper in ("LOCAL", "DEFAULT"):
                return "UTC"
            try:
                ZoneInfo(zone)
            except (ZoneInfoNotFoundError, ValueError) as e:
                raise QueryError(
                    f'invalid value for parameter "TimeZone": "{value}"', "22023"
                ) from e
            return zone
        if name == "statement_timeout":
            _parse_duration(value)
            return value
        if name == "client_encoding":
            if value.upper().replace("-", "") not in ("UTF8", "UNICODE"):
                raise QueryError(
                    f'invalid value for parameter "client_encoding": "{value}" '
                    f"(only UTF8 is supported)",
                    "22023",
                )
            return "UTF8"
        if name == "datestyle":
            if "iso" not in value.lower() and value.lower() not in ("mdy", "ymd", "dmy"):
                raise QueryError(f'DateStyle "{value}" is not supported; use ISO', "0A000")
            return "ISO, MDY" if "iso" in value.lower() else "ISO, " + value.upper()
        if name == "intervalstyle" and value.lower() != "postgres":
            raise QueryError(f'IntervalStyle "{value}" is not supported; use postgres', "0A000")
        return value

    def _show(self, name: str) -> QueryResult:
        key = name.lower()
        if key == "all":
            rows = sorted(self.settings.items())
            cols = [
                ColumnInfo.of("name", pgtypes.TEXT),
                ColumnInfo.of("setting", pgtypes.TEXT),
                ColumnInfo.of("description", pgtypes.TEXT),
            ]
            batch = pa.record_batch(
                [
                    pa.array([_DISPLAY_NAMES.get(k, k) for k, _ in rows]),
                    pa.array([v for _, v in rows]),
                    pa.array([""] * len(rows)),
                ],
                names=["name", "setting", "description"],
            )
            return QueryResult(cols, iter([batch]), "SHOW")
        if key == "transaction isolation level":
            key = "transaction_isolation"
        if key not in self.settings:
            raise QueryError(f'unrecognized configuration parameter "{name}"', "42704")
        value = self.settings[key]
        if key == "statement_timeout":
            value = _show_duration(value)
        column = _DISPLAY_NAMES.get(key, key)  # Postgres: SHOW timezone is "TimeZone"
        batch = pa.record_batch([pa.array([value], pa.string())], names=[column])
        return QueryResult([ColumnInfo.of(column, pgtypes.TEXT)], iter([batch]), "SHOW")

    # -- extended protocol helpers -----------------------------------------------------------

    def describe(self, sql: str, params: Sequence[object] | None = None) -> list[ColumnInfo]:
        """Columns `sql` would return, without running it (for Describe). [] if none."""
        try:
            stmt = sqlparse.parse_sql(sql)[0].stmt
        except (pglast.parser.ParseError, IndexError):
            return []
        if isinstance(stmt, ast.VariableShowStmt):
            key = (stmt.name or "").lower()
            return [ColumnInfo.of(key if key != "all" else "name", pgtypes.TEXT)]
        if isinstance(stmt, ast.FetchStmt):  # a prepared FETCH: the cursor's columns
            cursor = self._cursors.get(stmt.portalname or "")
            return [] if cursor is None or stmt.ismove else list(cursor.columns)
        if not isinstance(stmt, ast.SelectStmt | ast.ExplainStmt):
            return []
        count = max(_param_count(stmt), len(params or ()))
        values = list(params or ()) + [None] * (count - len(params or ()))
        result = self.execute(sql, values)
        columns = result.columns
        result.close()
        return columns


def _param_count(stmt: ast.Node) -> int:
    highest = 0

    def visit(node: Any) -> None:
        nonlocal highest
        if isinstance(node, ast.ParamRef):
            highest = max(highest, node.number or 0)

    rewrite._walk(stmt, visit)
    return highest


def _show_duration(value: str) -> str:
    seconds = _parse_duration(value)
    if seconds == 0:
        return "0"
    if seconds < 1 or seconds != int(seconds):
        return f"{int(seconds * 1000)}ms"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)}min"
    return f"{int(seconds)}s"


def wait_for_lsn(db: LakeDatabase, lsn: int, timeout: float = 10.0) -> bool:
    """Refresh until the database serves at least `lsn` (tests, `streambed verify`)."""
    deadline = time.monotonic() + timeout
    while True:
        db.refresh()
        current = db.watermark
        if current is not None and current.lsn >= lsn:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
