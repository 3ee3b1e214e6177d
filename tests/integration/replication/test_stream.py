"""The replication stream against a real Postgres: data, acks, keepalives, restarts."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from streambed.core.errors import Kind, Policy, SourceError
from streambed.source import (
    Keepalive,
    ReplicationStream,
    XLogData,
    slot_position,
    sql_connect,
)
from tests.integration.replication.conftest import (
    PUBLICATION,
    Source,
    commit_end_lsn,
    commits,
    read_keepalive,
    read_until,
    wait_for,
)

pytestmark = pytest.mark.integration


def confirmed_flush(source: Source) -> int | None:
    with sql_connect(source.db.url) as conn:
        position = slot_position(conn, source.slot)
    assert position is not None
    return position.confirmed_flush_lsn


def insert_transactions(source: Source, count: int, first_id: int = 1) -> None:
    for i in range(first_id, first_id + count):
        source.db.psql("INSERT INTO t VALUES (%s, %s)", [i, f"row-{i}"])


def test_streams_transactions_and_confirms_exactly_the_acked_lsn(source: Source) -> None:
    insert_transactions(source, 3)
    created_at = source.slot_result.consistent_point
    with source.stream(status_interval=0.1) as stream:
        messages = read_until(stream, lambda m: len(commits(m)) >= 3)
        kinds = [m.payload[:1] for m in messages]
        assert kinds == [b"B", b"R", b"I", b"C", b"B", b"I", b"C", b"B", b"I", b"C"]
        assert b"row-2" in messages[5].payload
        assert all(m.wal_end >= m.wal_start for m in messages)
        ends = [commit_end_lsn(c.payload) for c in commits(messages)]
        assert ends == sorted(ends)

        # Reading (and status updates every 0.1 s) confirms nothing while nothing is acked.
        for _ in range(3):
            stream.read(0.1)
        assert confirmed_flush(source) == created_at

        stream.ack(ends[0])
        stream.ack(ends[0] - 1)  # backward: ignored
        assert stream.acked_lsn == ends[0]
        assert stream.send_status(force=True)
        wait_for(lambda: confirmed_flush(source) == ends[0])
        for _ in range(5):  # keep reading and sending status: it stays exactly there
            stream.read(0.1)
        assert confirmed_flush(source) == ends[0]

        stream.ack(ends[2])
        stream.send_status(force=True)
        wait_for(lambda: confirmed_flush(source) == ends[2])
    assert confirmed_flush(source) == ends[2]  # close reports the acked LSN, not more


def test_send_status_respects_interval(source: Source) -> None:
    with source.stream(status_interval=3600) as stream:
        assert not stream.send_status()
        assert stream.send_status(force=True)
        assert not stream.send_status()


def test_idle_read_returns_none_on_time(source: Source) -> None:
    with source.stream() as stream:
        started = time.monotonic()
        while time.monotonic() - started < 1:  # drain any startup keepalive
            if stream.read(0.05) is None:
                break
        started = time.monotonic()
        assert stream.read(0.3) is None
        elapsed = time.monotonic() - started
        assert 0.25 < elapsed < 0.8


def test_keepalive_reports_wal_end_when_idle(source: Source) -> None:
    insert_transactions(source, 1)
    with source.stream() as stream:
        messages = read_until(stream, lambda m: len(commits(m)) >= 1)
        end = commit_end_lsn(commits(messages)[0].payload)
        keepalive = read_keepalive(stream)
        assert keepalive.wal_end >= end
        assert stream.last_wal_end >= keepalive.wal_end
        # Acknowledging the keepalive's WAL end when idle lets the slot move past it.
        stream.ack(keepalive.wal_end)
        stream.send_status(force=True)
        wait_for(lambda: confirmed_flush(source) == keepalive.wal_end)


def test_answers_keepalives_that_ask_for_a_reply(source: Source) -> None:
    # wal_sender_timeout is per connection: the source asks for a reply after 1 s of silence
    # and drops us after 2 s without one. The stream itself never volunteers a status here.
    url = source.db.url + "?options=-c%20wal_sender_timeout%3D2s"
    stream = ReplicationStream.start(url, source.slot, PUBLICATION, status_interval=3600)
    try:
        asked: list[Keepalive] = []
        started = time.monotonic()
        while time.monotonic() - started < 5:
            message = stream.read(0.2)
            if isinstance(message, Keepalive) and message.reply_requested:
                asked.append(message)
        assert len(asked) >= 2  # still connected well past the timeout: the replies worked
    finally:
        stream.close()


def test_restart_during_streaming_then_resume_from_acked_lsn(source: Source) -> None:
    insert_transactions(source, 3)
    stream = source.stream(status_interval=0.1)
    try:
        messages = read_until(stream, lambda m: len(commits(m)) >= 3)
        ends = [commit_end_lsn(c.payload) for c in commits(messages)]
        stream.ack(ends[0])  # only the first transaction is durable downstream
        stream.send_status(force=True)
        wait_for(lambda: confirmed_flush(source) == ends[0])

        source.db.server.restart(mode="immediate")  # a crash: nothing is flushed politely
        with pytest.raises(SourceError) as caught:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                stream.read(0.2)
        assert caught.value.kind is Kind.SOURCE_UNREACHABLE
        assert caught.value.policy is Policy.RETRY
        assert source.db.server.password not in str(caught.value)
    finally:
        stream.close()

    with source.stream(ends[0]) as resumed:
        again = read_until(resumed, lambda m: len(commits(m)) >= 2)
        inserts = [m.payload for m in again if m.payload[:1] == b"I"]
        assert len(inserts) == 2
        assert b"row-2" in inserts[0] and b"row-3" in inserts[1]
        assert [commit_end_lsn(c.payload) for c in commits(again)] == ends[1:]
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # and nothing more
            assert not isinstance(resumed.read(0.1), XLogData)


def test_clean_close_frees_the_slot(source: Source) -> None:
    stream = source.stream()
    stream.read(0.1)
    stream.close()
    stream.close()  # idempotent
    with sql_connect(source.db.url) as conn:
        wait_for(lambda: not _active(conn, source.slot), timeout=5)
    with pytest.raises(SourceError):
        stream.read(0.1)


def _active(conn: psycopg.Connection[Any], slot: str) -> bool:
    position = slot_position(conn, slot)
    return position is not None and position.active
