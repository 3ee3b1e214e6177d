"""The per-connection protocol state machine: frontend messages in, backend messages out.

No socket I/O: `startup` returns the answer to a StartupMessage, `handle` returns an iterator of
byte chunks (each one or more complete backend messages; a result streams one chunk per record
batch). The socket layer writes the chunks; tests compare them.

States: authenticating (SCRAM exchange) -> ready -> closed. In the extended protocol an error
sets "ignore until Sync": every message up to the next Sync is dropped without an answer.
SQL-level state (transaction status I/T/E recognised by parsing, 25P02 in a failed block,
settings such as TimeZone) belongs to the database session; the handler reports it in
ReadyForQuery and ParameterStatus.

`cancel()` may be called from another thread: it interrupts the running statement through the
database session. The statement timeout is the session's own (`SET statement_timeout`, default
from STREAMBED_QUERY_STATEMENT_TIMEOUT): the database session stops the statement and says so.

An `observer` (`QueryObserver`, optional: the metrics) hears each statement's duration, from
its start to its last row, and each error sent, by SQLSTATE.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from streambed.server import pgtypes
from streambed.server.wire import messages, params, results, statements
from streambed.server.wire.auth import MECHANISM, AuthFailed, ScramExchange, UserStore
from streambed.server.wire.messages import ProtocolViolation

log = logging.getLogger(__name__)

BATCH_ROWS_HINT = 10_000
TOO_MANY_CLIENTS = "sorry, too many clients already"  # 53300, Postgres' words


# ---- what the handler needs from the database layer -------------------------------------


class Column(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type_oid(self) -> int: ...
    @property
    def typmod(self) -> int: ...
    @property
    def type_name(self) -> str: ...


class Result(Protocol):
    """One statement's outcome; iterating it streams the rows as Arrow record batches."""

    @property
    def columns(self) -> Sequence[Column]: ...
    @property
    def command_tag(self) -> str: ...
    def __iter__(self) -> Iterator[pa.RecordBatch]: ...
    def close(self) -> None: ...


class Session(Protocol):
    """A database session (`streambed.server.database.DbSession`). It owns the SQL-level
    state: transaction status (recognised by parsing), settings, 25P02 after a failed
    statement in a transaction block."""

    def execute(self, sql: str, params: Sequence[object] | None = None) -> Result: ...
    def describe(self, sql: str, params: Sequence[object] | None = None) -> Sequence[Column]: ...
    def interrupt(self) -> None: ...
    def close(self) -> None: ...
    @property
    def transaction_status(self) -> str: ...
    @property
    def timezone(self) -> str: ...
    def parameter_status(self) -> dict[str, str]: ...
    def cursor_columns(self, name: str) -> Sequence[Column] | None:
        """Columns of a cursor declared with SQL DECLARE, or None if there is none."""
        ...


class Database(Protocol):
    def session(self, user: str = ..., database: str | None = ...) -> Session: ...


# ---- errors ----------------------------------------------------------------------------------


class SqlError(Exception):
    """An error reported to the client as an ErrorResponse with this SQLSTATE."""

    def __init__(
        self, sqlstate: str, message: str, *, hint: str | None = None, position: int | None = None
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint
        self.position = position


def _from_exception(error: BaseException) -> SqlError:
    if isinstance(error, SqlError):
        return error
    sqlstate = getattr(error, "sqlstate", None)
    message = getattr(error, "message", None) or str(error)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        hint, position = getattr(error, "hint", None), getattr(error, "position", None)
        return SqlError(sqlstate, str(message), hint=hint, position=position)
    return SqlError("XX000", str(message) or type(error).__name__)


# ---- state -----------------------------------------------------------------------------------


class Phase(enum.Enum):
    STARTUP = "startup"
    SASL_INITIAL = "sasl_initial"
    SASL_FINAL = "sasl_final"
    READY = "ready"
    CLOSED = "closed"


class Cancel(enum.Enum):
    USER = "canceling statement due to user request"


@dataclass
class Prepared:
    sql: str
    param_oids: tuple[int, ...]
    # Result columns computed by Describe (without running the statement), reused.
    described: list[results.ColumnSpec] | None = None
    placeholders: int = 0  # highest $n in sql


def _used(statement: Prepared, values: list[params.ParamValue]) -> list[params.ParamValue]:
    """The parameters the statement uses. Postgres accepts values for declared parameters a
    statement never refers to ($1 used, 40000 declared); DuckDB refuses them, so only those
    up to the highest $n go to the database (a statement without $n, but with DuckDB's `?`,
    keeps them all)."""
    n = statement.placeholders
    if len(values) > n and (n or "?" not in statement.sql):
        return values[:n]
    return values


@dataclass
class Portal:
    statement: Prepared
    values: list[params.ParamValue]
    result_formats: tuple[int, ...]
    result: Result | None = None
    columns: list[results.ColumnSpec] = field(default_factory=list)
    encoder: results.BatchEncoder | None = None
    batches: Iterator[pa.RecordBatch] | None = None  # rows not yet sent
    pending: pa.RecordBatch | None = None
    done: bool = False
    started: float = 0.0  # time.monotonic() at its start; 0 once its end was reported


class QueryObserver(Protocol):
    """What the handler reports (`streambed.metrics.query.QueryMetrics`)."""

    def statement(self, seconds: float) -> None: ...
    def error(self, sqlstate: str) -> None: ...


MAX_COLUMNS = 1664  # Postgres' limit on the columns of a result


def _pg_type(column: Column) -> pgtypes.PgType:
    own = getattr(column, "pg_type", None)  # the database's own account, when it gives one
    if isinstance(own, pgtypes.PgType) and own.oid == column.type_oid:
        return own
    base = pgtypes.BY_OID.get(column.type_oid)
    if base is None:
        base = pgtypes.PgType(column.type_oid, column.type_name, -1)
    return base.with_typmod(column.typmod)


def _specs(
    columns: Sequence[Column], result_formats: Sequence[int] = ()
) -> list[results.ColumnSpec]:
    """RowDescription entries: types, formats, and for a column taken straight from a
    table, that table's OID and the column's number (0 otherwise). More columns than
    Postgres allows is 54011 (a RowDescription could not even count past 32767)."""
    if len(columns) > MAX_COLUMNS:
        raise SqlError("54011", f"target lists can have at most {MAX_COLUMNS} entries")
    origins = [
        (int(getattr(c, "table_oid", 0)), int(getattr(c, "column_number", 0))) for c in columns
    ]
    return results.column_specs([(c.name, _pg_type(c)) for c in columns], result_formats, origins)


# Startup parameters a client may set, applied with SET (pgjdbc sends TimeZone, psql
# application_name); anything else in the startup packet is ignored.
STARTUP_SETTINGS = ("application_name", "TimeZone", "DateStyle", "IntervalStyle", "search_path")


class ConnectionHandler:
    """Protocol state of one client connection."""

    def __init__(
        self,
        database: Database,
        users: UserStore,
        *,
        process_id: int,
        secret_key: int,
        admit: Callable[[], bool] | None = None,
        observer: QueryObserver | None = None,
    ) -> None:
        self._database = database
        self._observer = observer
        self._users = users
        # Asked once authentication has succeeded, before the session opens: False means no
        # session slot is free (53300). None admits everyone.
        self._admit = admit
        self.process_id = process_id
        self.secret_key = secret_key
        self.state = Phase.STARTUP
        self.user = ""
        self._startup_parameters: dict[str, str] = {}
        self._reported: dict[str, str] = {}
        self._session: Session | None = None
        self._scram: ScramExchange | None = None
        self._statements: dict[str, Prepared] = {}
        self._portals: dict[str, Portal] = {}
        self._ignore_until_sync = False
        self._lock = threading.Lock()
        self._running = False
        self._cancel: Cancel | None = None

    # ---- startup and authentication ------------------------------------------------------

    def startup(self, startup: messages.StartupMessage) -> list[bytes]:
        if self.state is not Phase.STARTUP:
            raise ProtocolViolation("unexpected startup message")
        self._startup_parameters = dict(startup.parameters)
        self.user = startup.parameters.get("user", "")
        if not self.user:
            self.state = Phase.CLOSED
            return [
                messages.error_response(
                    "28000", "no PostgreSQL user name specified in startup packet", severity="FATAL"
                )
            ]
        if not self._users.enabled:
            return self._authenticated()
        verifier = self._users.verifier(self.user)
        self._scram = ScramExchange(
            verifier if verifier is not None else self._users.mock_verifier(self.user),
            known_user=verifier is not None,
        )
        self.state = Phase.SASL_INITIAL
        return [messages.authentication_sasl([MECHANISM])]

    def _authenticated(self) -> list[bytes]:
        if self._admit is not None and not self._admit():
            self.state = Phase.CLOSED
            return [messages.error_response("53300", TOO_MANY_CLIENTS, severity="FATAL")]
        try:
            session = self._database.session(
                self.user, self._startup_parameters.get("database") or None
            )
        except Exception as e:  # the database cannot serve: tell the client, then close
            self.state = Phase.CLOSED
            error = _from_exception(e)
            return [messages.error_response(error.sqlstate, error.message, severity="FATAL")]
        self._session = session
        for name in STARTUP_SETTINGS:
            value = self._startup_parameters.get(name)
            if value:
                quoted = value.replace("'", "''")
                try:
                    session.execute(f"SET {name} = '{quoted}'").close()
                except Exception as e:
                    log.info(
                        "startup setting ignored",
                        extra={"fields": {"name": name, "error": str(e)}},
                    )
        self.state = Phase.READY
        out = [messages.authentication_ok()]
        self._reported = dict(session.parameter_status())
        out += [messages.parameter_status(k, v) for k, v in self._reported.items()]
        out.append(messages.backend_key_data(self.process_id, self.secret_key))
        out.append(self._ready())
        return out

    def _auth_failed(self) -> list[bytes]:
        self.state = Phase.CLOSED
        if self._observer is not None:
            self._observer.error(AuthFailed.sqlstate)
        return [
            messages.error_response(
                AuthFailed.sqlstate,
                f'password authentication failed for user "{self.user}"',
                severity="FATAL",
            )
        ]

    def _password(self, body: bytes) -> list[bytes]:
        assert self._scram is not None
        try:
            if self.state is Phase.SASL_INITIAL:
                initial = messages.parse_sasl_initial(body)
                if initial.mechanism != MECHANISM:
                    raise AuthFailed(f"unsupported SASL mechanism {initial.mechanism!r}")
                server_first = self._scram.first(initial.data)
                self.state = Phase.SASL_FINAL
                return [messages.authentication(messages.AUTH_SASL_CONTINUE, server_first)]
            server_final = self._scram.final(body)
        except (AuthFailed, ProtocolViolation) as e:
            log.info("authentication failed", extra={"fields": {"user": self.user, "why": str(e)}})
            return self._auth_failed()
        self._scram = None
        final = messages.authentication(messages.AUTH_SASL_FINAL, server_final)
        rest = self._authenticated()
        return rest if self.closed else [final, *rest]

    # ---- message dispatch ----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is Phase.CLOSED

    def handle(self, type_code: bytes, body: bytes) -> Generator[bytes, None, None]:
        """Answer one frontend message. Raises nothing for bad input: a protocol violation
        yields a FATAL ErrorResponse and closes the handler."""
        try:
            msg = messages.parse_frontend(type_code, body)
            if isinstance(msg, messages.Terminate):
                self.close()
                return
            if self.state in (Phase.SASL_INITIAL, Phase.SASL_FINAL):
                if not isinstance(msg, messages.Password):
                    raise ProtocolViolation(
                        f"expected SASL response, got message type {type_code!r}"
                    )
                yield from self._password(msg.body)
                return
            if self.state is not Phase.READY:
                raise ProtocolViolation(f"unexpected message type {type_code!r}")
            yield from self._dispatch(msg)
        except ProtocolViolation as e:
            self.close()
            if self._observer is not None:
                self._observer.error(e.sqlstate)
            yield messages.error_response(e.sqlstate, str(e), severity="FATAL")

    def _dispatch(self, msg: messages.FrontendMessage) -> Iterator[bytes]:
        if isinstance(msg, messages.Query):
            yield from self._simple_query(msg.sql)
            return
        if isinstance(msg, messages.Sync):
            self._ignore_until_sync = False
            self._close_portal("")
            yield self._ready()
            return
        if isinstance(msg, messages.Flush):
            return
        if isinstance(msg, messages.Password):
            raise ProtocolViolation("unexpected password message")
        if self._ignore_until_sync:
            return
        try:
            if isinstance(msg, messages.Parse):
                yield self._parse(msg)
            elif isinstance(msg, messages.Bind):
                yield self._bind(msg)
            elif isinstance(msg, messages.Describe):
                yield from self._describe(msg)
            elif isinstance(msg, messages.Execute):
                yield from self._execute(msg)
            elif isinstance(msg, messages.Close):
                if msg.kind == "S":
                    self._statements.pop(msg.name, None)
                else:
                    self._close_portal(msg.name)
                yield messages.close_complete()
        except SqlError as e:
            self._ignore_until_sync = True
            yield self._error(e)

    def _ready(self) -> bytes:
        status = self._session.transaction_status if self._session is not None else "I"
        return messages.ready_for_query(status.encode("ascii"))

    def _close_portal(self, name: str) -> None:
        portal = self._portals.pop(name, None)
        if portal is not None and portal.result is not None:
            portal.result.close()

    # ---- simple query --------------------------------------------------------------------

    def _simple_query(self, sql: str) -> Iterator[bytes]:
        # A simple Query destroys the unnamed statement and portal, like Postgres.
        self._statements.pop("", None)
        self._close_portal("")
        parts = statements.split(sql)
        if not parts:
            yield messages.empty_query_response()
        for part in parts:
            portal = Portal(Prepared(part, ()), [], ())
            try:
                self._start(portal)
                if portal.columns:
                    yield results.row_description(portal.columns)
                yield from self._stream(portal, 0)
            except SqlError as e:
                self._finished(portal)
                yield self._error(e)
                break
            finally:
                if portal.result is not None:
                    portal.result.close()
        yield self._ready()

    # ---- extended query ------------------------------------------------------------------

    def _parse(self, msg: messages.Parse) -> bytes:
        if msg.statement and msg.statement in self._statements:
            raise SqlError("42P05", f'prepared statement "{msg.statement}" already exists')
        if len(statements.split(msg.sql)) > 1:
            raise SqlError("42601", "cannot insert multiple commands into a prepared statement")
        self._statements[msg.statement] = Prepared(
            msg.sql, msg.param_oids, placeholders=statements.placeholder_count(msg.sql)
        )
        return messages.parse_complete()

    def _bind(self, msg: messages.Bind) -> bytes:
        statement = self._statements.get(msg.statement)
        if statement is None:
            raise SqlError("26000", f'prepared statement "{msg.statement}" does not exist')
        if msg.portal and msg.portal in self._portals:
            raise SqlError("42P03", f'cursor "{msg.portal}" already exists')
        try:
            values = params.decode_all(
                statement.param_oids,
                msg.param_formats,
                msg.params,
                params.timezone(self._require_session().timezone),
            )
        except params.ParamError as e:
            raise SqlError(e.sqlstate, str(e)) from e
        self._close_portal(msg.portal)
        self._portals[msg.portal] = Portal(statement, values, msg.result_formats)
        return messages.bind_complete()

    def _describe(self, msg: messages.Describe) -> Iterator[bytes]:
        if msg.kind == "P":
            if msg.name and msg.name not in self._portals:
                # a cursor declared with SQL DECLARE is a portal too (psycopg's named
                # cursors describe it before fetching)
                declared = self._require_session().cursor_columns(msg.name)
                if declared is not None:
                    specs = _specs(declared, ())
                    yield results.row_description(specs) if specs else messages.no_data()
                    return
            portal = self._portal(msg.name)
            if portal.result is None and not portal.done:
                self._start(portal)
            yield (
                results.row_description(portal.columns) if portal.columns else messages.no_data()
            )
            return
        statement = self._statements.get(msg.name)
        if statement is None:
            raise SqlError("26000", f'prepared statement "{msg.name}" does not exist')
        # Unspecified parameter types are described as text: clients then send text, which
        # DuckDB casts from the parameter's usage.
        oids = [oid or params.TEXT for oid in statement.param_oids]
        oids += [params.TEXT] * (statement.placeholders - len(oids))
        if len(oids) > messages.MAX_PARAMETERS:
            raise SqlError(
                "54000",
                f"statement has {len(oids)} parameters; the protocol allows at most "
                f"{messages.MAX_PARAMETERS}",
            )
        yield messages.parameter_description(oids)
        if statement.described is None:
            with self._guard():
                try:
                    unknown: list[params.ParamValue] = [None] * len(oids)
                    columns = self._require_session().describe(
                        statement.sql, _used(statement, unknown)
                    )
                except Exception as e:
                    raise self._stopped(e) from e
            statement.described = _specs(columns, ())
        described = statement.described
        yield results.row_description(described) if described else messages.no_data()

    def _portal(self, name: str) -> Portal:
        portal = self._portals.get(name)
        if portal is None:
            raise SqlError("34000", f'portal "{name}" does not exist')
        return portal

    def _execute(self, msg: messages.Execute) -> Iterator[bytes]:
        portal = self._portal(msg.portal)
        try:
            if portal.result is None and not portal.done:
                self._start(portal)
            yield from self._stream(portal, msg.max_rows)
        except SqlError:
            self._finished(portal)
            raise

    # ---- running statements --------------------------------------------------------------

    def _require_session(self) -> Session:
        if self._session is None:
            raise SqlError("08003", "no database session")
        return self._session

    def _start(self, portal: Portal) -> None:
        """Run the portal's statement; `_stream` then sends its rows."""
        sql = portal.statement.sql
        if not sql.strip():
            portal.done = True
            return
        portal.started = time.monotonic()
        with self._guard():
            result = self._run(sql, _used(portal.statement, portal.values))
        portal.result = result
        try:
            portal.columns = _specs(result.columns, portal.result_formats)
        except SqlError:
            portal.done = True
            raise
        if portal.columns:
            portal.encoder = results.BatchEncoder(portal.columns, self._require_session().timezone)
            portal.batches = iter(result)

    def _run(self, sql: str, values: list[params.ParamValue]) -> Result:
        session = self._require_session()
        try:
            return session.execute(sql, values)
        except Exception as e:
            error = self._stopped(e)
            untyped = [params.infer_untyped(v) for v in values]
            retry = (
                self._cancel is None
                and error.sqlstate.startswith("42")
                and error.sqlstate != "42601"
                and untyped != values
            )
            if retry:
                # Parameters sent without a type whose usage leaves it open ($1 + 1): give
                # each its literal's natural type and try once more.
                try:
                    return session.execute(sql, untyped)
                except Exception as second:
                    log.debug("retry with inferred parameter types failed: %s", second)
            raise error from e

    def _stopped(self, error: BaseException) -> SqlError:
        if self._cancel is not None:
            return SqlError("57014", self._cancel.value)
        return _from_exception(error)

    def _stream(self, portal: Portal, max_rows: int) -> Iterator[bytes]:
        """Send up to max_rows (0: all) rows of a started portal, then CommandComplete or
        PortalSuspended."""
        result = portal.result
        if result is None:
            yield messages.empty_query_response()
            return
        if not portal.columns or portal.done:
            portal.done = True
            self._finished(portal)
            yield from self._setting_changes()
            yield messages.command_complete(result.command_tag)
            return
        assert portal.encoder is not None and portal.batches is not None
        sent = 0
        with self._guard():
            try:
                while max_rows == 0 or sent < max_rows:
                    batch = portal.pending
                    portal.pending = None
                    if batch is None:
                        batch = next(portal.batches, None)
                        if batch is None:
                            break
                    if max_rows and batch.num_rows > max_rows - sent:
                        take = max_rows - sent
                        portal.pending = batch.slice(take)
                        batch = batch.slice(0, take)
                    if batch.num_rows:
                        yield portal.encoder.encode(batch)
                        sent += batch.num_rows
                suspended = bool(max_rows) and sent >= max_rows and self._has_more(portal)
            except Exception as e:
                portal.done = True
                raise self._stopped(e) from e
        if suspended:
            yield messages.portal_suspended()
            return
        portal.done = True
        self._finished(portal)
        yield messages.command_complete(_select_tag(result.command_tag, sent))

    @staticmethod
    def _has_more(portal: Portal) -> bool:
        """Peek one batch so a portal that ends exactly at max_rows completes instead of
        suspending (what Postgres does)."""
        if portal.pending is not None:
            return True
        assert portal.batches is not None
        batch = next(portal.batches, None)
        while batch is not None and batch.num_rows == 0:
            batch = next(portal.batches, None)
        portal.pending = batch
        return batch is not None

    def _finished(self, portal: Portal) -> None:
        """The portal's statement ended (its last row, or an error): report its duration."""
        if portal.started and self._observer is not None:
            self._observer.statement(time.monotonic() - portal.started)
        portal.started = 0.0

    def _error(self, error: SqlError) -> bytes:
        if self._observer is not None:
            self._observer.error(error.sqlstate)
        return _error(error)

    def _setting_changes(self) -> Iterator[bytes]:
        """ParameterStatus for every reported setting a statement changed (SET TimeZone...)."""
        if self._session is None:
            return
        current = self._session.parameter_status()
        for name, value in current.items():
            if self._reported.get(name) != value:
                self._reported[name] = value
                yield messages.parameter_status(name, value)

    # ---- cancel and timeout --------------------------------------------------------------

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Marks a statement as running, so cancel can stop it."""
        with self._lock:
            self._running = True
            self._cancel = None
        try:
            yield
        finally:
            with self._lock:
                self._running = False

    def _interrupt(self, reason: Cancel) -> None:
        with self._lock:
            if not self._running or self._session is None:
                return
            self._cancel = reason
            session = self._session
        session.interrupt()

    def cancel(self) -> None:
        """Stop the running statement (CancelRequest). Safe from any thread; a no-op when the
        connection is idle."""
        self._interrupt(Cancel.USER)

    def close(self) -> None:
        """End the connection: interrupt whatever runs and release the database session."""
        self.state = Phase.CLOSED
        for name in list(self._portals):
            self._close_portal(name)
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):
                session.interrupt()
            try:
                session.close()
            except Exception as e:
                log.warning("closing database session failed", extra={"fields": {"error": str(e)}})


def _error(error: SqlError) -> bytes:
    return messages.error_response(
        error.sqlstate, error.message, hint=error.hint, position=error.position
    )


def _select_tag(tag: str, rows: int) -> str:
    """SELECT (and FETCH) report the rows this Execute sent (as Postgres does for a portal
    run in pieces); the database's tag counts the whole statement."""
    verb = tag.split(" ", 1)[0]
    if tag == "" or verb == "SELECT":
        return f"SELECT {rows}"
    return f"FETCH {rows}" if verb == "FETCH" else tag
