"""The socket layer of the query server: accept connections, frame messages, write what the
handler answers. It decides nothing about SQL.

One thread per connection (DuckDB releases the GIL while it works, so queries of different
clients run in parallel). The startup phase (SSLRequest, CancelRequest, connection limits, TLS
requirement) is handled here because it is about the socket; everything after the
StartupMessage goes to `ConnectionHandler`. Every problem with one client (malformed or huge
message, TLS failure, disconnect mid-result) is logged as one line and closes only that
connection.

Before authentication a connection is held to what Postgres holds it to: one deadline from
accept to authenticated (`auth_timeout`), small messages (the startup packet, SASL), and a
cap on connections not yet authenticated (`max_pending`) apart from the session cap
(`max_connections`, authenticated sessions only; see `slots`). The accept loop takes the
pending slot before it starts a thread and refuses a connection past the cap itself, so a
flood of sockets costs no threads.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from streambed.core.errors import ConfigError
from streambed.core.listen import listen
from streambed.server.wire import messages
from streambed.server.wire.auth import UsersFileError, UserStore
from streambed.server.wire.connection import AuthTimeout, ClientGone, Connection, refuse_at_once
from streambed.server.wire.handler import (
    TOO_MANY_CLIENTS,
    ConnectionHandler,
    Database,
    Phase,
    QueryObserver,
)
from streambed.server.wire.messages import ProtocolViolation
from streambed.server.wire.slots import Slots, Ticket
from streambed.server.wire.tls import REFUSED_PLAINTEXT, TlsMode, server_context

if TYPE_CHECKING:
    from streambed.core.config import Settings

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5433
DEFAULT_MAX_CONNECTIONS = 100
DEFAULT_MAX_PENDING = 64
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
DEFAULT_AUTH_TIMEOUT = 60.0  # seconds from accept to authenticated (authentication_timeout)
MAX_STARTUP_PACKET = 10_000  # Postgres' own limit for the startup packet
# Largest message before authentication (SASLInitialResponse, SASLResponse). A SCRAM-SHA-256
# message is 50-200 bytes (a nonce, a salt, a proof, at most a user name); 8 KiB leaves room
# for any user name while a client that declares a huge message is refused before its body
# is read. (Postgres allows 64 KiB, sized for GSSAPI tokens, which streambed does not offer.)
MAX_AUTH_MESSAGE = 8192
REFUSE_LOG_INTERVAL = 1.0  # refusals at accept are logged at most this often
_FLUSH_AFTER = frozenset(
    {messages.SYNC, messages.FLUSH, messages.QUERY, messages.PASSWORD, messages.TERMINATE}
)
_HEADER = struct.Struct("!ci")


@dataclass(frozen=True)
class ServerOptions:
    """Settings of the query server's socket layer, from `Settings` (the STREAMBED_QUERY_*
    variables; docs/configuration.md describes each). The statement timeout is not here: it
    is the database sessions' default `statement_timeout` (`DatabaseSettings`)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    users: str = field(default="", repr=False)
    users_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls: TlsMode = TlsMode.OFF
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_pending: int = DEFAULT_MAX_PENDING
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    auth_timeout: float = DEFAULT_AUTH_TIMEOUT

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerOptions:
        """Options from validated settings; raises ConfigError if the users cannot be read."""
        host, port = settings.query_host_port or (DEFAULT_HOST, DEFAULT_PORT)
        raw_mode = settings.query_tls.strip().lower()
        cert, key = settings.query_tls_cert, settings.query_tls_key
        options = cls(
            host=host.strip("[]") or "0.0.0.0",
            port=port,
            users=settings.query_users,
            users_file=Path(settings.query_users_file) if settings.query_users_file else None,
            tls_cert=Path(cert) if cert else None,
            tls_key=Path(key) if key else None,
            tls=TlsMode(raw_mode) if raw_mode else (TlsMode.ON if cert else TlsMode.OFF),
            max_connections=settings.query_max_connections,
            max_pending=settings.query_max_pending_connections,
            max_message_bytes=settings.query_max_message_bytes,
            auth_timeout=settings.query_auth_timeout,
        )
        try:
            options.user_store()
        except (UsersFileError, OSError) as e:
            raise ConfigError(
                f"invalid query server users (STREAMBED_QUERY_USERS / "
                f"STREAMBED_QUERY_USERS_FILE): {e}"
            ) from e
        return options

    def user_store(self) -> UserStore:
        store = UserStore.from_passwords(self.users) if self.users else UserStore({})
        if self.users_file is not None:
            store = store.merged(UserStore.from_file(self.users_file))
        return store


class ConnectionObserver(QueryObserver, Protocol):
    """What the server reports besides statements (`streambed.metrics.query.QueryMetrics`):
    connections as they are accepted and closed (refused ones are errors)."""

    def connection_opened(self) -> None: ...
    def connection_closed(self) -> None: ...


class QueryServer:
    """The Postgres-wire query server. `start()` listens and returns; `stop()` ends every
    connection and thread it started.

    `listener`: a socket already bound and listening (`streambed.core.listen.listen`), used
    instead of binding `options.host:options.port`; `streambed run` binds it once and hands
    it to each query process it starts (`streambed.server.supervisor`). `stop()` closes it."""

    def __init__(
        self,
        options: ServerOptions,
        database: Database,
        *,
        listener: socket.socket | None = None,
        observer: ConnectionObserver | None = None,
    ) -> None:
        self.options = options
        self._observer = observer
        self._database = database
        self._users = options.user_store()
        self._tls: ssl.SSLContext | None = None
        if options.tls is not TlsMode.OFF and options.tls_cert and options.tls_key:
            self._tls = server_context(options.tls_cert, options.tls_key)
        self._listener: socket.socket | None = listener
        self._accept_thread: threading.Thread | None = None
        self._slots = Slots(options.max_pending, options.max_connections)
        self._lock = threading.Lock()
        self._handlers: dict[int, ConnectionHandler] = {}
        self._connections: set[Connection] = set()
        self._threads: set[threading.Thread] = set()
        self._stopping = threading.Event()
        self._refused = 0  # refusals at accept not yet logged
        self._refused_logged = 0.0
        self.port = options.port

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> QueryServer:
        if self._listener is None:
            self._listener = listen(self.options.host, self.options.port)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        if not self._users.enabled:
            log.warning("query server has no users: password authentication is off")
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="streambed-query-accept", daemon=True
        )
        self._accept_thread.start()
        log.info(
            "query server listening",
            extra={
                "fields": {
                    "host": self.options.host,
                    "port": self.port,
                    "tls": self.options.tls.value,
                    "users": len(self._users),
                }
            },
        )
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            handlers = list(self._handlers.values())
            connections = list(self._connections)
        for handler in handlers:
            handler.cancel()
        for conn in connections:
            conn.shutdown()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def __enter__(self) -> QueryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def connection_count(self) -> int:
        """Authenticated sessions (what STREAMBED_QUERY_MAX_CONNECTIONS caps)."""
        return self._slots.sessions

    @property
    def pending_count(self) -> int:
        """Connections accepted and not yet authenticated."""
        return self._slots.pending

    # ---- accepting -----------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, address = self._listener.accept()
            except TimeoutError:
                self._log_refusals()
                continue
            except OSError as e:
                if not self._stopping.is_set():
                    log.error("accept failed", extra={"fields": {"error": str(e)}})
                continue
            ticket = self._slots.reserve()
            if ticket is None:
                # No thread, no read: answer, close, take the next one.
                refuse_at_once(sock, _REFUSAL)
                if self._observer is not None:
                    self._observer.error("53300")
                self._refused += 1
                self._log_refusals()
                continue
            peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
            conn = Connection(sock, peer, time.monotonic() + self.options.auth_timeout)
            thread = threading.Thread(
                target=self._serve,
                args=(conn, ticket),
                name=f"streambed-query-{peer}",
                daemon=True,
            )
            with self._lock:
                self._connections.add(conn)
                self._threads.add(thread)
            try:
                thread.start()
            except RuntimeError as e:  # the process cannot start another thread
                log.error("cannot serve connection", extra={"fields": {"error": str(e)}})
                self._forget(conn, ticket, thread)
                refuse_at_once(sock, _REFUSAL)

    def _log_refusals(self) -> None:
        now = time.monotonic()
        if self._refused and now - self._refused_logged >= REFUSE_LOG_INTERVAL:
            log.warning(
                "connections refused: too many not yet authenticated",
                extra={"fields": {"refused": self._refused, "limit": self.options.max_pending}},
            )
            self._refused = 0
            self._refused_logged = now

    def _forget(self, conn: Connection, ticket: Ticket, thread: threading.Thread) -> None:
        self._slots.release(ticket)
        with self._lock:
            self._connections.discard(conn)
            self._threads.discard(thread)

    def _serve(self, conn: Connection, ticket: Ticket) -> None:
        peer = conn.peer
        handler: ConnectionHandler | None = None
        if self._observer is not None:
            self._observer.connection_opened()
        try:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            handler = self._startup(conn, ticket)
            if handler is not None:
                self._session_loop(conn, handler)
        except ClientGone as e:
            if not self._stopping.is_set():
                log.info("client disconnected", extra={"fields": {"peer": peer, "why": str(e)}})
        except AuthTimeout as e:
            # As Postgres: closed without a message (the client may be mid-handshake).
            log.warning("connection closed", extra={"fields": {"peer": peer, "why": str(e)}})
        except ProtocolViolation as e:
            log.warning("protocol violation", extra={"fields": {"peer": peer, "error": str(e)}})
            if self._observer is not None:
                self._observer.error(e.sqlstate)
            with contextlib.suppress(ClientGone, AuthTimeout):
                conn.send(messages.error_response(e.sqlstate, str(e), severity="FATAL"))
                conn.flush()
        except (ssl.SSLError, OSError) as e:
            if not self._stopping.is_set():
                log.warning("connection failed", extra={"fields": {"peer": peer, "error": str(e)}})
        except Exception:
            log.exception("connection crashed", extra={"fields": {"peer": peer}})
        finally:
            if handler is not None:
                handler.close()
                with self._lock:
                    self._handlers.pop(handler.process_id, None)
            conn.close()
            self._forget(conn, ticket, threading.current_thread())
            if self._observer is not None:
                self._observer.connection_closed()

    # ---- startup phase -------------------------------------------------------------------

    def _read_startup(self, conn: Connection) -> messages.StartupPacket:
        (length,) = struct.unpack("!i", conn.read(4))
        if not 8 <= length <= MAX_STARTUP_PACKET:
            raise ProtocolViolation(
                f"invalid startup packet length {length} (at most {MAX_STARTUP_PACKET} bytes)"
            )
        return messages.parse_startup(conn.read(length - 4))

    def _startup(self, conn: Connection, ticket: Ticket) -> ConnectionHandler | None:
        while True:
            packet = self._read_startup(conn)
            if isinstance(packet, messages.SSLRequest):
                if conn.tls:
                    raise ProtocolViolation("SSLRequest on a connection already using TLS")
                if self._tls is None:
                    conn.send(b"N")
                    conn.flush()
                    continue
                conn.send(b"S")
                conn.flush()
                conn.upgrade(self._tls)
                continue
            if isinstance(packet, messages.GSSENCRequest):
                conn.send(b"N")
                conn.flush()
                continue
            if isinstance(packet, messages.CancelRequest):
                self._cancel(packet, conn.peer)
                return None
            return self._open_session(conn, packet, ticket)

    def _cancel(self, request: messages.CancelRequest, peer: str) -> None:
        with self._lock:
            handler = self._handlers.get(request.process_id)
        if handler is None or not secrets.compare_digest(
            handler.secret_key.to_bytes(4, "big"), request.secret_key.to_bytes(4, "big")
        ):
            log.info("cancel request for unknown backend", extra={"fields": {"peer": peer}})
            return
        log.info("cancel request", extra={"fields": {"peer": peer, "pid": request.process_id}})
        handler.cancel()

    def _refuse(self, conn: Connection, sqlstate: str, text: str) -> None:
        log.warning("connection refused", extra={"fields": {"peer": conn.peer, "reason": text}})
        if self._observer is not None:
            self._observer.error(sqlstate)
        conn.send(messages.error_response(sqlstate, text, severity="FATAL"))
        conn.flush()

    def _open_session(
        self, conn: Connection, startup: messages.StartupMessage, ticket: Ticket
    ) -> ConnectionHandler | None:
        if self.options.tls is TlsMode.REQUIRE and not conn.tls:
            self._refuse(conn, *REFUSED_PLAINTEXT)
            return None
        if self._slots.sessions_full():
            # Checked again when authentication succeeds; refusing now spares the exchange.
            self._refuse(conn, "53300", TOO_MANY_CLIENTS)
            return None
        with self._lock:
            pid = secrets.randbelow(2**31 - 1) + 1
            while pid in self._handlers:
                pid = secrets.randbelow(2**31 - 1) + 1
            handler = ConnectionHandler(
                self._database,
                self._users,
                process_id=pid,
                secret_key=secrets.randbits(32),
                admit=lambda: self._slots.admit(ticket),
                observer=self._observer,
            )
            self._handlers[pid] = handler
        for chunk in handler.startup(startup):
            conn.send(chunk)
        conn.flush()
        if handler.closed:
            handler.close()
            with self._lock:
                self._handlers.pop(handler.process_id, None)
            return None
        return handler

    # ---- after startup -------------------------------------------------------------------

    def _session_loop(self, conn: Connection, handler: ConnectionHandler) -> None:
        authenticating = True
        limit, setting = MAX_AUTH_MESSAGE, "before authentication"
        while not handler.closed:
            if authenticating and handler.state is Phase.READY:
                authenticating = False
                conn.authenticated()  # the deadline ends with authentication
                limit = self.options.max_message_bytes
                setting = "(STREAMBED_QUERY_MAX_MESSAGE_BYTES)"
            type_code, length = _HEADER.unpack(conn.read(5))
            if length < 4:
                raise ProtocolViolation(f"invalid message length {length}")
            if length - 4 > limit:
                raise ProtocolViolation(
                    f"message of {length - 4} bytes exceeds the limit of {limit} bytes {setting}"
                )
            body = conn.read(length - 4) if length > 4 else b""
            answers = handler.handle(type_code, body)
            try:
                for chunk in answers:
                    conn.send(chunk)
            finally:
                answers.close()  # a client gone mid-result: end the statement's generator
            if type_code in _FLUSH_AFTER or handler.closed:
                conn.flush()


_REFUSAL = messages.error_response("53300", TOO_MANY_CLIENTS, severity="FATAL")
