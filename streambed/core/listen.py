"""The listening sockets of the query server and of the metrics endpoint, in a module light
enough for the command to check the addresses before anything slow starts
(`streambed.server` loads DuckDB)."""

from __future__ import annotations

import errno
import os
import socket
from typing import Final

from streambed.core.errors import ConfigError

QUERY: Final = ("STREAMBED_QUERY_LISTEN", "the query server")
METRICS: Final = ("STREAMBED_METRICS_LISTEN", "the metrics endpoint")


def listen(host: str, port: int, what: tuple[str, str] = QUERY) -> socket.socket:
    """A listening socket on host:port; `ConfigError` when the address cannot be had (in
    use by another process, not an address of this machine, a port below 1024). `what`:
    the setting that names the address and the server it is for (`QUERY`, `METRICS`)."""
    setting, server = what
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
            f"{setting}={host}:{port}: {server} cannot listen there "
            f"({reason}); {hint}, or set {setting}= (empty) to run without {server}"
        ) from None


def check_listen(host: str, port: int, what: tuple[str, str] = QUERY) -> None:
    """Fail early, before a slot or Spark is started, when host:port cannot be listened
    on (`listen`); the server binds it again when it starts."""
    listen(host, port, what).close()
