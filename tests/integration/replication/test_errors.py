"""Every way the source can refuse us gives a SourceError of the right kind, naming the fix,
and never containing the password."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from streambed.core.errors import Kind, Policy, SourceError
from streambed.source import (
    ReplicationConnection,
    ReplicationStream,
    check_source,
    ensure_publication,
    ensure_slot,
    sql_connect,
)
from tests.fixtures.postgres import PgDatabase, ThrowawayPostgres, free_port
from tests.integration.replication.conftest import PUBLICATION, Source

pytestmark = pytest.mark.integration

SECRET = "s3cret-Pa55word"


def connect_error(url: str, timeout: float = 10.0) -> SourceError:
    with pytest.raises(SourceError) as caught:
        ReplicationConnection.connect(url, timeout=timeout).close()
    return caught.value


def test_wrong_password(pg_db: PgDatabase) -> None:
    url = pg_db.url_as("postgres", SECRET)
    for error in (connect_error(url), _sql_connect_error(url)):
        assert error.kind is Kind.SOURCE_AUTH and error.policy is Policy.MANUAL
        assert "password authentication failed" in str(error)
        assert "fix the user name or password in STREAMBED_SOURCE_URL" in str(error)
        assert SECRET not in str(error)
        assert "postgres:***@" in str(error)


def test_role_without_replication(pg_db: PgDatabase) -> None:
    role = "noreplication_" + pg_db.name
    pg_db.server.create_role(role, SECRET)
    url = pg_db.url_as(role, SECRET)
    error = connect_error(url)
    assert error.kind is Kind.SOURCE_AUTH
    assert f"ALTER ROLE {role} WITH REPLICATION" in str(error)
    assert SECRET not in str(error)
    with sql_connect(url) as conn, pytest.raises(SourceError) as caught:
        check_source(conn)
    assert caught.value.kind is Kind.SOURCE_AUTH
    assert f"ALTER ROLE {role} WITH REPLICATION" in str(caught.value)


def test_replication_role_cannot_create_publication_for_all_tables(pg_db: PgDatabase) -> None:
    role = "replicator_" + pg_db.name
    pg_db.server.create_role(role, SECRET, replication=True)
    url = pg_db.url_as(role, SECRET)
    with sql_connect(url) as conn:
        check_source(conn)  # may replicate: fine
        with pytest.raises(SourceError) as caught:
            ensure_publication(conn, PUBLICATION)
    assert caught.value.kind is Kind.SOURCE_SETUP
    assert f"CREATE PUBLICATION {PUBLICATION} FOR ALL TABLES" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_unreachable_port_is_retryable() -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/postgres"
    started = time.monotonic()
    error = connect_error(url)
    assert time.monotonic() - started < 5
    assert error.kind is Kind.SOURCE_UNREACHABLE and error.policy is Policy.RETRY
    assert "check that Postgres is running" in str(error)
    assert SECRET not in str(error)
    assert _sql_connect_error(url).kind is Kind.SOURCE_UNREACHABLE


def test_unknown_host_is_unreachable() -> None:
    error = connect_error(f"postgresql://postgres:{SECRET}@no-such-host.invalid:5432/postgres")
    assert error.kind is Kind.SOURCE_UNREACHABLE
    assert SECRET not in str(error)


def test_silent_server_times_out() -> None:
    with socket.socket() as listener:  # accepts TCP but never answers the startup packet
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        started = time.monotonic()
        error = connect_error(f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/db", timeout=0.5)
        elapsed = time.monotonic() - started
    assert 0.4 < elapsed < 3
    assert error.kind is Kind.SOURCE_UNREACHABLE
    assert "timed out" in str(error) and SECRET not in str(error)


def test_missing_database_names_the_fix(pg_db: PgDatabase) -> None:
    error = connect_error(pg_db.server.url("no_such_db"))
    assert error.kind is Kind.SOURCE_SETUP
    assert "fix the database name" in str(error)


@pytest.fixture(scope="module")
def replica_server() -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres(wal_level="replica")
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_wal_level_replica(replica_server: ThrowawayPostgres) -> None:
    replica_server.psql(f"ALTER ROLE postgres PASSWORD '{SECRET}'")
    url = replica_server.url(password=SECRET)
    with sql_connect(url) as conn:
        with pytest.raises(SourceError) as caught:
            check_source(conn)
        assert caught.value.kind is Kind.SOURCE_SETUP
        assert "ALTER SYSTEM SET wal_level = logical" in str(caught.value)
        assert "restart" in str(caught.value)
        # Creating the slot anyway fails the same way, from the server's own error.
        with ReplicationConnection.connect(url) as repl, pytest.raises(SourceError) as slot_error:
            ensure_slot(conn, repl, "never_created")
    assert slot_error.value.kind is Kind.SOURCE_SETUP
    assert "ALTER SYSTEM SET wal_level = logical" in str(slot_error.value)
    assert SECRET not in str(slot_error.value) + str(caught.value)


def test_missing_slot(source: Source) -> None:
    with pytest.raises(SourceError) as caught:
        ReplicationStream.start(source.db.url, "no_such_slot", PUBLICATION)
    assert caught.value.kind is Kind.SOURCE_SETUP
    assert "no_such_slot" in str(caught.value) and "does not exist" in str(caught.value)


def test_slot_in_use(source: Source) -> None:
    with source.stream(), pytest.raises(SourceError) as caught:
        source.stream()
    assert caught.value.kind is Kind.SOURCE_BUSY
    assert "is active for PID" in str(caught.value)
    assert "another client is streaming from this slot" in str(caught.value)
    assert source.db.server.password not in str(caught.value)


def test_missing_publication_while_streaming(source: Source) -> None:
    source.db.psql("INSERT INTO t VALUES (1, 'x')")
    stream = ReplicationStream.start(source.db.url, source.slot, "no_such_pub")
    try:
        with pytest.raises(SourceError) as caught:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                stream.read(0.2)
    finally:
        stream.close()
    assert caught.value.kind is Kind.SOURCE_SETUP
    assert 'publication "no_such_pub" does not exist' in str(caught.value)
    assert "STREAMBED_PUBLICATION" in str(caught.value)


def _sql_connect_error(url: str) -> SourceError:
    with pytest.raises(SourceError) as caught:
        sql_connect(url).close()
    return caught.value
