"""How a failed copy job is reported: the worker's message out of Spark's wrapping, and
which failures the copy manager retries under a new snapshot."""

from __future__ import annotations

import pytest

from streambed.copy.duck import _message
from streambed.copy.job import _failure
from streambed.copy.task import SCHEMA_MARK, copy_failure
from streambed.core.errors import Kind, SchemaError, SourceError, StreambedError
from streambed.source.snapshot import CopyInterrupted, SnapshotExpired


def _spark_error(what: str, message: str) -> Exception:
    """A worker's `copy_failure` as Spark re-raises it in the driver: inside a traceback."""
    return RuntimeError(
        "An exception was thrown from the Python worker. Traceback (most recent call last):\n"
        f"  ...\nRuntimeError: {copy_failure(what, RuntimeError(message))}\n\tat org.apache..."
    )


@pytest.mark.parametrize(
    "message",
    [
        "terminating connection due to administrator command SSL connection has been closed",
        "server closed the connection unexpectedly This probably means the server terminated",
        "canceling statement due to user request",
        "canceling statement due to statement timeout",
        "could not receive data from server: Connection reset by peer",
    ],
)
def test_a_lost_connection_is_an_interrupted_copy(message: str) -> None:
    error = _failure("public.t", _spark_error("copying public.t", message))
    assert isinstance(error, CopyInterrupted)
    assert message in str(error) and "public.t" in str(error)
    assert error.kind is Kind.SOURCE_SETUP


def test_an_expired_snapshot_is_reported_as_such() -> None:
    error = _failure(
        "public.t", _spark_error("copying public.t", 'invalid snapshot identifier: "0-1"')
    )
    assert isinstance(error, SnapshotExpired)
    assert not isinstance(error, CopyInterrupted)


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        ("permission denied for table t", "GRANT SELECT ON public.t"),
        (
            'query would be affected by row-level security policy for table "t"',
            "BYPASSRLS",
        ),
        ('relation "public.t" does not exist', "dropped during its copy"),
        (
            'connection to server at "h", port 5 failed: FATAL: password authentication failed',
            "password authentication failed",
        ),
    ],
)
def test_other_source_errors_are_not_retried(message: str, hint: str) -> None:
    error = _failure("public.t", _spark_error("copying public.t", message))
    assert type(error) is SourceError
    assert hint in str(error)
    assert error.kind is not Kind.SOURCE_UNREACHABLE  # the manager waits only for those


@pytest.mark.parametrize(
    "message",
    [
        # DuckDB's reader, the source stopped
        'IO Error: Unable to connect to Postgres at "user=postgres host=127.0.0.1 port=5 '
        'application_name=\'streambed-copy 1/0\'": connection to server at "127.0.0.1", '
        "port 5 failed: Connection refused Is the server running on that host and accepting "
        "TCP/IP connections?",
        # psycopg's, the source restarting
        'connection failed: connection to server at "10.0.0.1", port 5432 failed: FATAL:  '
        "the database system is starting up",
        'connection to server on socket "/run/postgresql/.s.PGSQL.5432" failed: No such file '
        "or directory",
    ],
)
def test_a_task_that_cannot_reach_the_source_waits_for_it(message: str) -> None:
    error = _failure("public.t", _spark_error("copying public.t", message))
    assert type(error) is SourceError
    assert error.kind is Kind.SOURCE_UNREACHABLE
    assert "could not connect" in str(error) and "public.t" in str(error)


def test_a_value_the_lake_cannot_hold_is_a_schema_error() -> None:
    error = _failure("public.t", _spark_error(SCHEMA_MARK, "public.t.at: 294248-01-01 ..."))
    assert isinstance(error, SchemaError)
    assert "294248-01-01" in str(error)


def test_a_spark_failure_without_a_worker_message_is_a_storage_error() -> None:
    error = _failure("public.t", RuntimeError("Job aborted due to stage failure: lost executor"))
    assert type(error) is StreambedError
    assert error.kind is Kind.STORAGE
    assert "lost executor" in str(error)


DUCKDB_CONNECT = (
    'IO Error: Unable to connect to Postgres at "user=postgres host=127.0.0.1 port=5 '
    'application_name=streambed-copy connect_timeout=10": connection to server at '
    '"127.0.0.1", port 5 failed: '
)


@pytest.mark.parametrize(
    "fatal",
    [
        # a source stopping (smart or fast): it refuses new connections before it goes
        "FATAL: the database system is shutting down",
        "FATAL: the database system is starting up",
        "FATAL: the database system is not yet accepting connections DETAIL: Consistent "
        "recovery state has not been yet reached.",
        "Connection refused Is the server running on that host and accepting TCP/IP connections?",
    ],
)
def test_duckdbs_connect_failure_keeps_what_says_the_source_is_unreachable(fatal: str) -> None:
    # The worker's message is DuckDB's, through `_message`: the server's FATAL must not
    # lose libpq's words around it, or the copy gives the table up instead of waiting.
    message = _message(Exception(DUCKDB_CONNECT + fatal))
    assert message.startswith('connection to server at "127.0.0.1", port 5 failed:')
    error = _failure("public.t", _spark_error("copying public.t", message))
    assert type(error) is SourceError
    assert error.kind is Kind.SOURCE_UNREACHABLE
    assert "could not connect" in str(error) and fatal.split(" DETAIL")[0] in str(error)


def test_duckdbs_login_failure_is_not_waited_for() -> None:
    message = _message(
        Exception(DUCKDB_CONNECT + 'FATAL: password authentication failed for user "u"')
    )
    error = _failure("public.t", _spark_error("copying public.t", message))
    assert error.kind is Kind.SOURCE_AUTH
