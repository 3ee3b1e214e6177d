"""Bad input and load: malformed messages, huge messages, clients vanishing mid-result, 1000
rapid connections, 32 concurrent clients. The server keeps serving everyone else."""

from __future__ import annotations

import contextlib
import ctypes
import socket
import struct
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from streambed.server.wire.server import QueryServer
from tests.integration.wire.conftest import ITEM_ROWS, conninfo

CONCURRENT_CLIENTS = 32
CONCURRENT_SECONDS = 5.0
RAPID_CONNECTIONS = 1000


def _startup(user: str = "alice") -> bytes:
    body = struct.pack("!i", 196608) + b"user\x00" + user.encode() + b"\x00\x00"
    return struct.pack("!i", len(body) + 4) + body


def _raw(server: QueryServer, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        with contextlib.suppress(OSError):  # the server may hang up before we are done
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)  # a truncated packet then ends in EOF, not a wait
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (ConnectionResetError, TimeoutError):
            pass
        return b"".join(chunks)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x00\x00\x08\x00\x00\x00\x00",  # protocol version 0.0
        b"\xff\xff\xff\xff",  # negative startup length
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # not Postgres at all
        b"\x00\x00\x00\x10\x00\x03\x00\x00user",  # truncated startup packet
        bytes(range(256)) * 4,
    ],
)
def test_garbage_before_startup_closes_only_that_connection(
    trust_server: QueryServer, payload: bytes
) -> None:
    with psycopg.connect(conninfo(trust_server), autocommit=True) as bystander:
        _raw(trust_server, payload)
        assert bystander.execute("SELECT count(*) FROM public.items").fetchone() == (ITEM_ROWS,)


@pytest.mark.parametrize(
    "message",
    [
        b"Y\x00\x00\x00\x04",  # unknown message type
        b"Q\x00\x00\x00\x02",  # length below 4
        b"Q\x7f\xff\xff\xff",  # 2 GB message: over the cap, refused before reading it
        b"B\x00\x00\x00\x08\x00\x00\x00\x00",  # truncated Bind
        b"P\x00\x00\x00\x0a\x00select",  # unterminated query string
    ],
)
def test_malformed_messages_after_startup(trust_server: QueryServer, message: bytes) -> None:
    with psycopg.connect(conninfo(trust_server), autocommit=True) as bystander:
        answer = _raw(trust_server, _startup() + message)
        assert b"08P01" in answer  # FATAL protocol_violation, then the server hangs up
        assert bystander.execute("SELECT 1").fetchone() == (1,)


def test_client_disconnecting_mid_result(trust_server: QueryServer) -> None:
    query = b"SELECT * FROM range(50000000) t(i)\x00"
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", trust_server.port), timeout=10) as sock:
            sock.sendall(_startup() + b"Q" + struct.pack("!i", len(query) + 4) + query)
            received = 0
            while received < 1_000_000:
                received += len(sock.recv(65536))
    with psycopg.connect(conninfo(trust_server), autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM public.items").fetchone() == (ITEM_ROWS,)
    deadline = time.monotonic() + 10
    while trust_server.connection_count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert trust_server.connection_count == 0  # the abandoned sessions were released


def test_concurrent_clients(server: QueryServer) -> None:
    queries = [
        ("SELECT count(*) FROM public.items", [(ITEM_ROWS,)]),
        ("SELECT sum(qty) FROM public.items WHERE active", None),
        ("SELECT id, name, price FROM public.items ORDER BY id LIMIT 500", None),
        ("SELECT day, count(*) FROM public.items GROUP BY day ORDER BY day", None),
    ]
    expected = {}
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        for sql, _ in queries:
            expected[sql] = c.execute(sql).fetchall()
    failures: list[BaseException] = []
    counts = [0] * CONCURRENT_CLIENTS

    connections = [
        psycopg.connect(conninfo(server), autocommit=True) for _ in range(CONCURRENT_CLIENTS)
    ]
    stop = time.monotonic() + CONCURRENT_SECONDS

    def client(index: int) -> None:
        try:
            with connections[index] as c:
                while time.monotonic() < stop:
                    sql = queries[counts[index] % len(queries)][0]
                    assert c.execute(sql, prepare=bool(index % 2)).fetchall() == expected[sql]
                    counts[index] += 1
        except BaseException as e:  # collected and reported below
            failures.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CONCURRENT_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert all(counts), counts


RAPID_CLIENT = """
import sys
from concurrent.futures import ThreadPoolExecutor
import psycopg

def connect_once(_):
    with psycopg.connect(sys.argv[1], autocommit=True) as c:
        return c.execute("SELECT 1").fetchone()[0]

with ThreadPoolExecutor(8) as pool:
    print(sum(pool.map(connect_once, range(int(sys.argv[2])))))
"""


def _free_thread_keys() -> int:
    """How many more pthread keys this process could create (glibc allows 1024)."""
    libc = ctypes.CDLL(None)
    keys: list[int] = []
    while len(keys) < 2048:
        key = ctypes.c_uint()
        if libc.pthread_key_create(ctypes.byref(key), None) != 0:
            break
        keys.append(key.value)
    for value in keys:
        libc.pthread_key_delete(ctypes.c_uint(value))
    return len(keys)


def test_rapid_connections(trust_server: QueryServer) -> None:
    # Each connection is served on a thread of its own. libpg_query (pglast) takes a pthread
    # key in every thread that parses and never gives it back: before streambed.server.
    # sqlparse, a thousand connections used up the process's 1024 keys, and libpq in the
    # process then failed to log in anywhere ("could not generate nonce").
    free = _free_thread_keys()
    done = subprocess.run(  # a server that stops answering fails on the timeout
        [sys.executable, "-c", RAPID_CLIENT, conninfo(trust_server), str(RAPID_CONNECTIONS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(RAPID_CONNECTIONS)
    with psycopg.connect(conninfo(trust_server), autocommit=True) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    assert _free_thread_keys() >= free - 8, (free, _free_thread_keys())
