"""The metrics endpoint on a loopback socket: its paths, its answers when not ready, and
clients that would hold it (slow, too many, huge): none of them stops it."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from streambed.core.listen import METRICS, listen
from streambed.metrics.health import Readiness
from streambed.metrics.http import MetricsServer


class Replication:
    not_streaming: str | None = None


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, Replication]]:
    registry = CollectorRegistry()
    Counter("streambed_example", "An example.", registry=registry).inc(3)
    replication = Replication()
    server = MetricsServer(
        listen("127.0.0.1", 0, METRICS),
        registry,
        Readiness(replication, None),
        max_connections=2,
        request_seconds=1.0,
    ).start()
    yield server, replication
    server.stop()


def get(port: int, path: str, method: str = "GET") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, answer.getheader("Content-Type") or "", answer.read().decode()
    finally:
        conn.close()


def test_metrics_are_prometheus_text(served: tuple[MetricsServer, Replication]) -> None:
    status, content_type, body = get(served[0].port, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "streambed_example_total 3.0" in body


def test_health_and_readiness(served: tuple[MetricsServer, Replication]) -> None:
    server, replication = served
    assert get(server.port, "/healthz")[::2] == (200, "ok\n")
    assert get(server.port, "/readyz")[::2] == (200, "ready\n")
    replication.not_streaming = "the source is not ready, retrying: refused"
    assert get(server.port, "/readyz")[::2] == (
        503,
        "not ready:\n- replication: the source is not ready, retrying: refused\n",
    )
    assert get(server.port, "/healthz")[0] == 200  # alive all the same


def test_unknown_paths_are_404_and_other_methods_501(
    served: tuple[MetricsServer, Replication],
) -> None:
    port = served[0].port
    assert get(port, "/metrics/../etc/passwd")[0] == 404
    assert get(port, "/")[0] == 404
    assert get(port, "/metrics", "POST")[0] == 501
    assert get(port, "/metrics", "HEAD")[::2] == (200, "")


def test_huge_headers_are_refused(served: tuple[MetricsServer, Replication]) -> None:
    with socket.create_connection(("127.0.0.1", served[0].port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.0 431")


def test_slow_clients_are_cut_off_and_too_many_closed_while_others_are_served(
    served: tuple[MetricsServer, Replication],
) -> None:
    port = served[0].port
    slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        for sock in slow:
            sock.sendall(b"GET /metr")  # and nothing more
        time.sleep(0.2)  # both hold a connection slot now
        with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
            third.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert third.recv(64) == b""  # closed unread: the cap is 2
        for sock in slow:  # cut off after request_seconds (1 s)
            assert sock.recv(64) == b""
    finally:
        for sock in slow:
            sock.close()
    assert _eventually_ok(port)  # their slots are free again


def _eventually_ok(port: int) -> bool:
    """/healthz answers 200 within 10 s (a cut connection's slot is released when its
    thread ends, a moment after the client saw the cut)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            return get(port, "/healthz")[0] == 200
        except (ConnectionError, http.client.HTTPException):
            time.sleep(0.05)
    return False
