"""Before login, as Postgres: one authentication deadline from accept, small messages, a cap
on connections not yet authenticated apart from the session cap, refusals without a thread;
and unsigned parameter counts. Real servers on free ports, raw sockets, psycopg, and real
Postgres 15 for the parameter counts. Each test ends with the server still serving."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from streambed.server.database import LakeDatabase
from streambed.server.wire import messages
from streambed.server.wire.server import MAX_AUTH_MESSAGE, QueryServer
from streambed.server.wire.tls import TlsMode
from tests.fixtures.postgres import ThrowawayPostgres
from tests.integration.wire.conftest import PASSWORD, USER, conninfo, start_server

pytestmark = pytest.mark.integration

AUTH_TIMEOUT = 1.5
MAX_PENDING = 4
MAX_SESSIONS = 2


@pytest.fixture(scope="module")
def quick(lake_database: LakeDatabase) -> Iterator[QueryServer]:
    """SCRAM users and a short authentication timeout."""
    srv = start_server(lake_database, users=f"{USER}:{PASSWORD}", auth_timeout=AUTH_TIMEOUT)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def capped(lake_database: LakeDatabase) -> Iterator[QueryServer]:
    """Small caps: 4 connections not yet authenticated, 2 sessions."""
    srv = start_server(
        lake_database,
        users=f"{USER}:{PASSWORD}",
        max_pending=MAX_PENDING,
        max_connections=MAX_SESSIONS,
    )
    yield srv
    srv.stop()


def _startup(user: str = USER, **extra: str) -> bytes:
    pairs = {"user": user, "database": "streambed", **extra}
    body = struct.pack("!i", 196608)
    body += b"".join(k.encode() + b"\x00" + v.encode() + b"\x00" for k, v in pairs.items())
    body += b"\x00"
    return struct.pack("!i", len(body) + 4) + body


def _connect(server: QueryServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    header = b""
    while len(header) < 5:
        chunk = sock.recv(5 - len(header))
        assert chunk, "the server closed the connection"
        header += chunk
    type_code, length = struct.unpack("!ci", header)
    body = b""
    while len(body) < length - 4:
        body += sock.recv(length - 4 - len(body))
    return type_code, body


def _fatal(data: bytes) -> dict[str, str]:
    """The fields of the one ErrorResponse the server sent before closing."""
    (type_code, body), *rest = messages.split_backend(data)
    assert type_code == b"E" and not rest, data
    fields = messages.parse_error_fields(body)
    assert fields["S"] == "FATAL"
    return fields


def _serves(server: QueryServer) -> None:
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM public.items").fetchone() == (2000,)


def _wait(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition(), "timed out waiting"


def _trickle(sock: socket.socket, data: bytes, every: float) -> float:
    """Send one byte every `every` seconds until the server hangs up; seconds it took."""
    started = time.monotonic()
    sock.settimeout(every)
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(65536) == b"":
                break
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
    else:
        pytest.fail("the server read a trickled message to its end")
    return time.monotonic() - started


# ---- one deadline from accept to authenticated ---------------------------------------------


def test_byte_by_byte_startup_is_cut_at_the_deadline(quick: QueryServer) -> None:
    # ~140 bytes at one every 0.25 s would take 35 s; the deadline is 1.5 s after accept
    with _connect(quick) as sock:
        took = _trickle(sock, _startup(application_name="x" * 100), every=0.25)
    assert AUTH_TIMEOUT - 0.3 < took < AUTH_TIMEOUT + 1.5, took
    _wait(lambda: quick.pending_count == 0)
    _serves(quick)


def test_byte_by_byte_sasl_is_cut_at_the_deadline(quick: QueryServer) -> None:
    with _connect(quick) as sock:
        started = time.monotonic()
        sock.sendall(_startup())
        assert _read_message(sock)[0] == b"R"  # AuthenticationSASL
        first = b"n,,n=,r=" + b"a" * 24
        body = messages.cstr("SCRAM-SHA-256") + struct.pack("!i", len(first)) + first
        _trickle(sock, messages.message(b"p", body), every=0.25)
        took = time.monotonic() - started
    assert AUTH_TIMEOUT - 0.3 < took < AUTH_TIMEOUT + 1.5, took
    _wait(lambda: quick.pending_count == 0)
    _serves(quick)


def test_idle_socket_is_closed_at_the_deadline_without_a_message(quick: QueryServer) -> None:
    with _connect(quick) as sock:
        started = time.monotonic()
        assert _read_all(sock) == b""  # as Postgres: no message, the connection just ends
        took = time.monotonic() - started
    assert AUTH_TIMEOUT - 0.3 < took < AUTH_TIMEOUT + 1.5, took
    _serves(quick)


def test_byte_by_byte_tls_handshake_is_cut_at_the_deadline(
    lake_database: LakeDatabase, tls_files: tuple[Path, Path]
) -> None:
    cert, key = tls_files
    srv = start_server(
        lake_database, tls_cert=cert, tls_key=key, tls=TlsMode.ON, auth_timeout=AUTH_TIMEOUT
    )
    try:
        client = ssl.create_default_context()
        client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
        outgoing = ssl.MemoryBIO()
        tls = client.wrap_bio(ssl.MemoryBIO(), outgoing)
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()  # a real ClientHello, a few hundred bytes
        with _connect(srv) as sock:
            started = time.monotonic()
            sock.sendall(struct.pack("!ii", 8, 80877103))  # SSLRequest
            assert sock.recv(1) == b"S"
            _trickle(sock, hello, every=0.25)
            took = time.monotonic() - started
        assert AUTH_TIMEOUT - 0.3 < took < AUTH_TIMEOUT + 1.5, took
        _wait(lambda: srv.pending_count == 0)
        _serves(srv)
    finally:
        srv.stop()


# ---- small messages before authentication -------------------------------------------------


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (b"p" + struct.pack("!i", 32 * 1024 * 1024 + 4), "before authentication"),
        (b"p" + struct.pack("!i", MAX_AUTH_MESSAGE + 5), "before authentication"),
        (b"Q" + struct.pack("!i", 32 * 1024 * 1024 + 4), "before authentication"),
    ],
    ids=["sasl-32MiB", "sasl-one-byte-over", "query-32MiB"],
)
def test_oversized_message_before_authentication_is_refused_at_once(
    quick: QueryServer, message: bytes, words: str
) -> None:
    with _connect(quick) as sock:
        sock.sendall(_startup())
        assert _read_message(sock)[0] == b"R"
        started = time.monotonic()
        sock.sendall(message)  # the header only: the body is never sent
        fields = _fatal(_read_all(sock))
        assert time.monotonic() - started < 1.0
    assert fields["C"] == "08P01" and words in fields["M"], fields
    _serves(quick)


def test_oversized_startup_packet_is_refused_at_once(quick: QueryServer) -> None:
    with _connect(quick) as sock:
        started = time.monotonic()
        sock.sendall(struct.pack("!ii", 10_001, 196608))
        fields = _fatal(_read_all(sock))
        assert time.monotonic() - started < 1.0
    assert fields["C"] == "08P01" and "startup packet length" in fields["M"], fields
    _serves(quick)


# ---- pending connections apart from sessions ----------------------------------------------


def test_unauthenticated_sockets_take_no_session_slot(capped: QueryServer) -> None:
    # more idle sockets than there are session slots, fewer than the pending cap
    idle = [_connect(capped) for _ in range(MAX_PENDING - 1)]
    try:
        _wait(lambda: capped.pending_count == MAX_PENDING - 1)
        with (
            psycopg.connect(conninfo(capped), autocommit=True) as a,
            psycopg.connect(conninfo(capped), autocommit=True) as b,
        ):
            assert a.execute("SELECT 1").fetchone() == b.execute("SELECT 1").fetchone() == (1,)
            assert capped.connection_count == MAX_SESSIONS
            with pytest.raises(psycopg.OperationalError, match="too many clients"):
                psycopg.connect(conninfo(capped))  # the session cap still holds
    finally:
        for sock in idle:
            sock.close()
    _wait(lambda: capped.pending_count == 0 and capped.connection_count == 0)
    _serves(capped)


def test_past_the_pending_cap_refused_at_once_without_a_thread(capped: QueryServer) -> None:
    idle = [_connect(capped) for _ in range(MAX_PENDING)]
    refused: list[socket.socket] = []
    try:
        _wait(lambda: capped.pending_count == MAX_PENDING)
        threads = threading.active_count()
        most = threads
        for _ in range(200):
            sock = _connect(capped)
            sock.sendall(_startup())
            refused.append(sock)
            most = max(most, threading.active_count())
        assert most <= threads + 2  # no thread for any of the 200 sockets
        started = time.monotonic()
        for sock in refused:
            fields = _fatal(_read_all(sock))
            assert (fields["C"], fields["M"]) == ("53300", "sorry, too many clients already")
        assert time.monotonic() - started < 2.0
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(conninfo(capped))
        assert capped.pending_count == MAX_PENDING
    finally:
        for sock in idle + refused:
            sock.close()
    _wait(lambda: capped.pending_count == 0)
    _serves(capped)


def test_cancel_gets_through_when_every_session_slot_is_taken(capped: QueryServer) -> None:
    # A CancelRequest is a connection of its own; a full session cap must not stop it.
    with (
        psycopg.connect(conninfo(capped), autocommit=True) as a,
        psycopg.connect(conninfo(capped), autocommit=True) as b,
    ):
        assert capped.connection_count == MAX_SESSIONS
        timer = threading.Timer(0.5, a.cancel_safe)
        timer.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            a.execute("SELECT count(*) FROM range(100000000000) t")
        timer.join()
        assert b.execute("SELECT 1").fetchone() == (1,)
    _wait(lambda: capped.connection_count == 0)
    _serves(capped)


def test_150_connections_refused_past_100(lake_database: LakeDatabase) -> None:
    srv = start_server(lake_database)  # the defaults: 100 sessions, 64 pending; trust
    connections: list[psycopg.Connection[tuple[object, ...]]] = []
    try:
        refused = []
        for _ in range(150):
            try:
                connections.append(psycopg.connect(conninfo(srv), autocommit=True))
            except psycopg.OperationalError as e:  # libpq gives no SQLSTATE for these
                refused.append("too many clients already" in str(e))
        assert (len(connections), refused) == (100, [True] * 50)
        assert connections[-1].execute("SELECT 1").fetchone() == (1,)
    finally:
        for c in connections:
            c.close()
        srv.stop()


# ---- parameter counts are unsigned 16-bit --------------------------------------------------

# libpq's blocking calls (psycopg's pgconn) hold the GIL while they wait, and the server runs
# in this process: the client runs in a process of its own.
MANY_PARAMETERS = """
import sys, psycopg
n = 40000
with psycopg.connect(sys.argv[1], autocommit=True) as c:
    pq = c.pgconn
    print(pq.prepare(b"s", b"SELECT $1::int + 1", [23] * n).status)
    described = pq.describe_prepared(b"s")
    print(described.status, described.nparams)
    done = pq.exec_prepared(b"s", [b"41"] + [b"1"] * (n - 1))
    print(done.status, done.get_value(0, 0).decode())
    print(pq.exec_prepared(b"s", [b"41"]).error_message.decode().split(", but")[0])
    print(c.execute("SELECT 1").fetchone()[0])
"""


def _many_parameters(url: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", MANY_PARAMETERS, url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def test_parse_and_bind_with_40000_parameters_as_postgres(
    quick: QueryServer, pg_server: ThrowawayPostgres
) -> None:
    ours = _many_parameters(conninfo(quick))
    assert ours == [
        "1",  # PGRES_COMMAND_OK
        "1 40000",
        "2 42",  # PGRES_TUPLES_OK
        "ERROR:  bind message supplies 1 parameters",
        "1",
    ]
    assert ours == _many_parameters(pg_server.url())
