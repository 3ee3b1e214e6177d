"""Reads and writes on one client socket (plain or TLS), and the one deadline that bounds
everything a client does before it has authenticated.

Until authentication completes, reads are unbuffered and every wait on the socket is given
only the time left before the connection's deadline, so a client that trickles a byte now
and then is cut at the deadline, not kept alive by each byte. After authentication reads
are buffered and have no timeout (an idle session may stay, as in Postgres).
"""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
import time

FLUSH_BYTES = 256 * 1024  # write buffered output once it is this large
_DRAIN_BYTES = 16 * 1024


class ClientGone(Exception):
    """The client closed the connection or the socket failed."""


class AuthTimeout(Exception):
    """The client did not finish authenticating within the authentication timeout."""


class Connection:
    """Buffered reads and writes on one client socket."""

    def __init__(self, sock: socket.socket, peer: str, deadline: float | None = None) -> None:
        self.sock = sock
        self.peer = peer
        self.tls = False
        # time.monotonic() by which authentication must be complete; None once it is
        self.deadline = deadline
        # Unbuffered until authentication completes: nothing a client sends before the TLS
        # handshake can be taken as sent over TLS, and no read can outlast the deadline.
        self._rfile: io.BufferedReader | None = None
        self._out: list[bytes] = []
        self._out_bytes = 0

    def _time_left(self) -> None:
        """Give the next socket operation only what is left of the deadline."""
        if self.deadline is None:
            return
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise AuthTimeout("authentication timeout")
        self.sock.settimeout(left)

    def upgrade(self, context: ssl.SSLContext) -> None:
        self._time_left()  # the handshake as a whole gets what is left
        try:
            self.sock = context.wrap_socket(self.sock, server_side=True)
        except TimeoutError as e:
            raise AuthTimeout("authentication timeout during the TLS handshake") from e
        self.tls = True

    def authenticated(self) -> None:
        """Authentication is complete: no deadline any more, buffered reads."""
        self.deadline = None
        self.sock.settimeout(None)
        self._rfile = io.BufferedReader(socket.SocketIO(self.sock, "rb"), 65536)

    def read(self, n: int) -> bytes:
        try:
            if self._rfile is not None:
                data = self._rfile.read(n)
            else:
                data = b""
                while len(data) < n:
                    self._time_left()
                    chunk = self.sock.recv(n - len(data))
                    if not chunk:
                        break
                    data += chunk
        except TimeoutError as e:
            if self.deadline is not None:
                raise AuthTimeout("authentication timeout") from e
            raise ClientGone(str(e)) from e
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
            self._time_left()
            self.sock.sendall(data)
        except TimeoutError as e:
            raise AuthTimeout("authentication timeout") from e
        except OSError as e:
            raise ClientGone(str(e)) from e

    def shutdown(self) -> None:
        """Wake a thread blocked on this connection (from another thread)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._rfile is not None:
            with contextlib.suppress(OSError):
                self._rfile.close()
        with contextlib.suppress(OSError):
            self.sock.close()


def refuse_at_once(sock: socket.socket, answer: bytes) -> None:
    """Answer a just-accepted socket and close it without waiting on the client: one
    non-blocking write (a short message fits the socket's send buffer), end of output, and
    a non-blocking drain of what the client already sent (so closing does not reset the
    connection before the client has read the answer)."""
    try:
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.send(answer)
            sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            sock.recv(_DRAIN_BYTES)
    finally:
        sock.close()
