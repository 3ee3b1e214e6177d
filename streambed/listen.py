"""The query server's listening socket, in a module light enough for the command to check
the address before anything slow starts (`streambed.server` loads DuckDB)."""

from __future__ import annotations

import errno
import os
import socket

from streambed.errors import ConfigError


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; `ConfigError` when the address cannot be had (in
    use by another process, not an address of this machine, a port below 1024)."""
    try:
        return socket.create_server((host, port), backlog=1024, reuse_port=False)
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else str(e)
        hint = (
            "another process listens there (another streambed?): stop it or choose a free port"
            if e.errno == errno.EADDRINUSE
            else "use an address of this machine and a port it may open"
        )
        raise ConfigError(
            f"STREAMBED_QUERY_LISTEN={host}:{port}: the query server cannot listen there "
            f"({reason}); {hint}, or set STREAMBED_QUERY_LISTEN= (empty) to run without "
            "the query server"
        ) from None


def check_listen(host: str, port: int) -> None:
    """Fail early, before a slot or Spark is started, when host:port cannot be listened
    on (`listen`); the server binds it again when it starts."""
    listen(host, port).close()
