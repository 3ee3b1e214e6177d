"""The socket layer of the query server: accept connections, frame messages, write what the
handler answers. It decides nothing about SQL.

One thread per connection (DuckDB releases the GIL while it works, so queries of different
clients run in parallel). The startup phase (SSLRequest, CancelRequest, connection limit, TLS
requirement) is handled here because it is about the socket; everything after the
StartupMessage goes to `ConnectionHandler`. Every problem with one client (malformed or huge
message, TLS failure, disconnect mid-result) is logged as one line and closes only that
connection.
"""

from __future__ import annotations

import contextlib
import io
import logging
import secrets
import socket
import ssl
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from streambed.errors import ConfigError
from streambed.listen import listen
from streambed.server.wire import messages
from streambed.server.wire.auth import UsersFileError, UserStore
from streambed.server.wire.handler import ConnectionHandler, Database, State
from streambed.server.wire.messages import ProtocolViolation
from streambed.server.wire.tls import REFUSED_PLAINTEXT, TlsMode, server_context

if TYPE_CHECKING:
    from streambed.config import Settings

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5433
DEFAULT_MAX_CONNECTIONS = 100
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
STARTUP_TIMEOUT_SECONDS = 30.0  # authentication_timeout: time allowed to finish startup
MAX_STARTUP_PACKET = 10_000  # Postgres' own limit for the startup packet
FLUSH_BYTES = 256 * 1024  # write buffered output once it is this large
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
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

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
            max_message_bytes=settings.query_max_message_bytes,
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


class ClientGone(Exception):
    """The client closed the connection or the socket failed."""


class _Connection:
    """Buffered reads and writes on one client socket (plain or TLS)."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.tls = False
        # Unbuffered until the startup packet is read, so nothing a client sends before the
        # TLS handshake can end up being treated as if it came over TLS.
        self._rfile: io.BufferedReader | None = None
        self._out: list[bytes] = []
        self._out_bytes = 0

    def upgrade(self, context: ssl.SSLContext) -> None:
        self.sock = context.wrap_socket(self.sock, server_side=True)
        self.tls = True

    def buffer_reads(self) -> None:
        self._rfile = io.BufferedReader(socket.SocketIO(self.sock, "rb"), 65536)

    def read(self, n: int) -> bytes:
        try:
            if self._rfile is not None:
                data = self._rfile.read(n)
            else:
                data = b""
                while len(data) < n:
                    chunk = self.sock.recv(n - len(data))
                    if not chunk:
                        break
                    data += chunk
        except (OSError, ValueError) as e:
            raise ClientGone(str(e)) from e
        if len(data) != n:
            raise ClientGone("connection closed by client")
        return data

    def send(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self._out:
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise ClientGone(str(e)) from e

    def close(self) -> None:
        if self._rfile is not None:
            with contextlib.suppress(OSError):
                self._rfile.close()
        with contextlib.suppress(OSError):
            self.sock.close()


class QueryServer:
    """The Postgres-wire query server. `start()` listens and returns; `stop()` ends every
    connection and thread it started.

    `listener`: a socket already bound and listening (`streambed.listen.listen`), used
    instead of binding `options.host:options.port`; `streambed run` binds it once and hands
    it to each query process it starts (`streambed.server.supervisor`). `stop()` closes it."""

    def __init__(
        self, options: ServerOptions, database: Database, *, listener: socket.socket | None = None
    ) -> None:
        self.options = options
        self._database = database
        self._users = options.user_store()
        self._tls: ssl.SSLContext | None = None
        if options.tls is not TlsMode.OFF and options.tls_cert and options.tls_key:
            self._tls = server_context(options.tls_cert, options.tls_key)
        self._listener: socket.socket | None = listener
        self._accept_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._handlers: dict[int, ConnectionHandler] = {}
        self._sockets: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._stopping = threading.Event()
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
            sockets = list(self._sockets)
        for handler in handlers:
            handler.cancel()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
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
        with self._lock:
            return len(self._handlers)

    # ---- accepting -----------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as e:
                if not self._stopping.is_set():
                    log.error("accept failed", extra={"fields": {"error": str(e)}})
                continue
            peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
            thread = threading.Thread(
                target=self._serve, args=(sock, peer), name=f"streambed-query-{peer}", daemon=True
            )
            with self._lock:
                self._sockets.add(sock)
                self._threads.add(thread)
            thread.start()

    def _serve(self, sock: socket.socket, peer: str) -> None:
        conn = _Connection(sock, peer)
        handler: ConnectionHandler | None = None
        try:
            sock.settimeout(STARTUP_TIMEOUT_SECONDS)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            handler = self._startup(conn)
            if handler is not None:
                conn.buffer_reads()
                self._session_loop(conn, handler)
        except ClientGone as e:
            if not self._stopping.is_set():
                log.info("client disconnected", extra={"fields": {"peer": peer, "why": str(e)}})
        except ProtocolViolation as e:
            log.warning("protocol violation", extra={"fields": {"peer": peer, "error": str(e)}})
            with contextlib.suppress(ClientGone):
                conn.send(messages.error_response(e.sqlstate, str(e), severity="FATAL"))
                conn.flush()
        except (ssl.SSLError, TimeoutError, OSError) as e:
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
            with self._lock:
                self._sockets.discard(sock)
                self._threads.discard(threading.current_thread())

    # ---- startup phase -------------------------------------------------------------------

    def _read_startup(self, conn: _Connection) -> messages.StartupPacket:
        (length,) = struct.unpack("!i", conn.read(4))
        if not 8 <= length <= MAX_STARTUP_PACKET:
            raise ProtocolViolation(f"invalid startup packet length {length}")
        return messages.parse_startup(conn.read(length - 4))

    def _startup(self, conn: _Connection) -> ConnectionHandler | None:
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
            return self._open_session(conn, packet)

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

    def _refuse(self, conn: _Connection, sqlstate: str, text: str) -> None:
        log.warning("connection refused", extra={"fields": {"peer": conn.peer, "reason": text}})
        conn.send(messages.error_response(sqlstate, text, severity="FATAL"))
        conn.flush()

    def _open_session(
        self, conn: _Connection, startup: messages.StartupMessage
    ) -> ConnectionHandler | None:
        if self.options.tls is TlsMode.REQUIRE and not conn.tls:
            self._refuse(conn, *REFUSED_PLAINTEXT)
            return None
        with self._lock:
            if len(self._handlers) >= self.options.max_connections:
                full = True
            else:
                full = False
                pid = secrets.randbelow(2**31 - 1) + 1
                while pid in self._handlers:
                    pid = secrets.randbelow(2**31 - 1) + 1
                handler = ConnectionHandler(
                    self._database,
                    self._users,
                    process_id=pid,
                    secret_key=secrets.randbits(32),
                )
                self._handlers[pid] = handler
        if full:
            self._refuse(conn, "53300", "sorry, too many clients already")
            return None
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

    def _session_loop(self, conn: _Connection, handler: ConnectionHandler) -> None:
        limit = self.options.max_message_bytes
        authenticating = True
        while not handler.closed:
            if authenticating and handler.state is State.READY:
                authenticating = False
                conn.sock.settimeout(None)  # the startup timeout ends with authentication
            type_code, length = _HEADER.unpack(conn.read(5))
            if length < 4:
                raise ProtocolViolation(f"invalid message length {length}")
            if length - 4 > limit:
                raise ProtocolViolation(
                    f"message of {length - 4} bytes exceeds the limit of {limit} bytes "
                    "(STREAMBED_QUERY_MAX_MESSAGE_BYTES)"
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
