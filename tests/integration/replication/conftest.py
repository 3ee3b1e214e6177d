"""Helpers for the replication tests: a prepared source and raw pgoutput parsing."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from streambed.source import (
    Keepalive,
    PublicationResult,
    ReplicationConnection,
    ReplicationStream,
    SlotResult,
    XLogData,
    ensure_publication,
    ensure_slot,
    sql_connect,
)
from tests.fixtures.postgres import PgDatabase

PUBLICATION = "streambed"
SLOT_PREFIX = "sb_"


@dataclass
class Source:
    db: PgDatabase
    slot: str
    publication: PublicationResult
    slot_result: SlotResult

    def stream(self, start_lsn: int = 0, **kwargs: Any) -> ReplicationStream:
        return ReplicationStream.start(self.db.url, self.slot, PUBLICATION, start_lsn, **kwargs)


@pytest.fixture
def source(pg_db: PgDatabase) -> Iterator[Source]:
    """A database with table t(id int primary key, v text), the publication and a slot."""
    pg_db.psql("CREATE TABLE t (id int PRIMARY KEY, v text)")
    slot = SLOT_PREFIX + pg_db.name
    with sql_connect(pg_db.url) as conn, ReplicationConnection.connect(pg_db.url) as repl:
        publication = ensure_publication(conn, PUBLICATION)
        slot_result = ensure_slot(conn, repl, slot)
    yield Source(pg_db, slot, publication, slot_result)


def commit_end_lsn(payload: bytes) -> int:
    """end_lsn of a raw pgoutput Commit ('C' flags commit_lsn end_lsn ts)."""
    assert payload[:1] == b"C"
    return int(struct.unpack_from(">Q", payload, 10)[0])


def message_prefix(payload: bytes) -> tuple[int, str, bytes]:
    """(flags, prefix, content) of a raw non-streamed pgoutput Message ('M')."""
    assert payload[:1] == b"M"
    flags = payload[1]
    end = payload.index(b"\0", 10)
    prefix = payload[10:end].decode()
    (length,) = struct.unpack_from(">I", payload, end + 1)
    return flags, prefix, payload[end + 5 : end + 5 + length]


def read_until(
    stream: ReplicationStream,
    done: Callable[[list[XLogData]], bool],
    timeout: float = 10.0,
) -> list[XLogData]:
    """XLogData messages until `done(messages)` holds; fails after `timeout` seconds."""
    messages: list[XLogData] = []
    deadline = time.monotonic() + timeout
    while not done(messages):
        assert time.monotonic() < deadline, f"timed out; got {[m.payload[:1] for m in messages]}"
        message = stream.read(0.2)
        if isinstance(message, XLogData):
            messages.append(message)
    return messages


def commits(messages: list[XLogData]) -> list[XLogData]:
    return [m for m in messages if m.payload[:1] == b"C"]


def read_keepalive(stream: ReplicationStream, timeout: float = 10.0) -> Keepalive:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = stream.read(0.2)
        if isinstance(message, Keepalive):
            return message
    raise AssertionError("no keepalive arrived")


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
