"""Heartbeats advance the source WAL and reach the stream as non-transactional messages."""

from __future__ import annotations

import pytest

from streambed.source import HEARTBEAT_PREFIX, Heartbeat, current_wal_lsn, sql_connect
from tests.fixtures.postgres import free_port
from tests.integration.replication.conftest import Source, message_prefix, read_until

pytestmark = pytest.mark.integration


def test_heartbeat_advances_wal_and_arrives_as_message(source: Source) -> None:
    with sql_connect(source.db.url) as conn, Heartbeat(source.db.url, interval=5.0) as heartbeat:
        before = current_wal_lsn(conn)
        assert heartbeat.maybe_beat(100.0)
        assert not heartbeat.maybe_beat(104.9)  # not due yet
        assert heartbeat.last_lsn is not None and heartbeat.last_lsn >= before
        assert current_wal_lsn(conn) > before
        assert heartbeat.maybe_beat(105.0)
        assert current_wal_lsn(conn) > heartbeat.last_lsn - 1

    with source.stream() as stream:
        messages = read_until(stream, lambda m: sum(x.payload[:1] == b"M" for x in m) >= 2)
    assert [m.payload[:1] for m in messages] == [b"M", b"M"]  # no Begin/Commit around them
    flags, prefix, content = message_prefix(messages[0].payload)
    assert (flags, prefix, content) == (0, HEARTBEAT_PREFIX, b"")


def test_heartbeat_off() -> None:
    heartbeat = Heartbeat("postgresql://nobody@127.0.0.1:1/db", interval=0)
    assert not heartbeat.maybe_beat(0.0)
    assert heartbeat.failures == 0


def test_heartbeat_failure_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    url = f"postgresql://postgres:topsecret@127.0.0.1:{free_port()}/postgres"
    with Heartbeat(url, interval=1.0, connect_timeout=2) as heartbeat:
        assert not heartbeat.maybe_beat(0.0)
        assert not heartbeat.maybe_beat(0.5) and heartbeat.failures == 1  # not retried early
        assert not heartbeat.maybe_beat(1.0)
        assert heartbeat.failures == 2
    assert "heartbeat failed" in caplog.text
    assert "topsecret" not in caplog.text


def test_heartbeat_reconnects_after_source_restart(source: Source) -> None:
    with Heartbeat(source.db.url, interval=1.0) as heartbeat:
        assert heartbeat.maybe_beat(0.0)
        first = heartbeat.last_lsn
        source.db.server.restart()
        assert heartbeat.maybe_beat(1.0)  # the stale connection is replaced within the beat
        assert heartbeat.failures == 0
        assert first is not None and heartbeat.last_lsn is not None
        assert heartbeat.last_lsn > first
