"""The metrics endpoint: `/metrics` (Prometheus text format, or OpenMetrics when the scraper
asks for it), `/healthz` and `/readyz`; any other path is 404, any method but GET and HEAD
501.

It runs on threads of its own, apart from the replication loop, and nothing a client does
reaches the loop: one thread per connection, at most `max_connections` at once (more are
closed at once, unread), each with `request_seconds` to send its request and read the
answer before its socket is shut; request lines and headers are bounded by the standard
library's HTTP server (414 and 431), and bodies are never read. An error while answering is
logged and closes that connection only.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from streambed.core.log import log
from streambed.metrics.health import Readiness

logger = logging.getLogger("streambed.metrics")

MAX_CONNECTIONS: Final = 16
REQUEST_SECONDS: Final = 10.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        listener: socket.socket,
        registry: CollectorRegistry,
        readiness: Readiness,
        max_connections: int,
        request_seconds: float,
    ) -> None:
        super().__init__(listener.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        self.registry = registry
        self.readiness = readiness
        self.request_seconds = request_seconds
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: closed unread
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("metrics request from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "streambed"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_seconds)
        # the whole exchange has `request_seconds`: a client that trickles bytes is cut off
        self._deadline = threading.Timer(self.server.request_seconds, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self) -> None:
        self._deadline.cancel()
        with contextlib.suppress(OSError):
            super().finish()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, *, head: bool) -> None:
        path = urlsplit(self.path).path
        content_type = "text/plain; charset=utf-8"
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            try:
                body = encoder(self.server.registry)
            except Exception as e:
                log(logger, "collecting metrics failed", logging.ERROR, error=str(e))
                self._send(500, b"collecting metrics failed; see the log\n", head=head)
                return
            self._send(200, body, content_type, head=head)
        elif path == "/healthz":
            self._send(200, b"ok\n", head=head)
        elif path == "/readyz":
            problems = self.server.readiness.problems()
            if problems:
                text = "not ready:\n" + "".join(f"- {p}\n" for p in problems)
                self._send(503, text.encode(), head=head)
            else:
                self._send(200, b"ready\n", head=head)
        else:
            self._send(404, b"not found: the paths are /metrics, /healthz and /readyz\n", head=head)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
        *,
        head: bool,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("metrics endpoint: " + format, *args)


class MetricsServer:
    """Serves `registry` and `readiness` on `listener` (bound by `streambed.core.listen.listen`)
    until `stop()`, which also closes it."""

    def __init__(
        self,
        listener: socket.socket,
        registry: CollectorRegistry,
        readiness: Readiness,
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_seconds: float = REQUEST_SECONDS,
    ) -> None:
        self._server = _Server(listener, registry, readiness, max_connections, request_seconds)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name="streambed-metrics",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.socket.getsockname()[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
