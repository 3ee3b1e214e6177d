"""The allow-list through the real QueryServer with psycopg: refused statements get their
SQLSTATE, the connection keeps serving, and a timeout while rows stream is 57014."""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg import errors

from streambed.server.wire.server import QueryServer
from tests.integration.wire.conftest import ITEM_ROWS, conninfo


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("SELECT * FROM pandas_scan(NULL)", errors.InsufficientPrivilege),
        ("SELECT * FROM enable_logging(storage := 'memory')", errors.InsufficientPrivilege),
        ("SELECT * FROM duckdb_settings()", errors.InsufficientPrivilege),
        ("SELECT * FROM \"query\"('select 42')", errors.InsufficientPrivilege),
        ("SELECT * FROM duckdb_views", errors.UndefinedTable),
        ("SELECT no_such_function()", errors.UndefinedFunction),
        ("DESCRIBE items", errors.SyntaxError),
        ("PRAGMA threads = 1", errors.SyntaxError),
    ],
)
def test_refused_and_the_connection_still_serves(
    server: QueryServer, sql: str, error: type[psycopg.Error]
) -> None:
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        with pytest.raises(error):
            c.execute(sql)
        assert c.execute("SELECT count(*) FROM items").fetchone() == (ITEM_ROWS,)


def test_syntax_error_carries_position_and_runs_nothing(server: QueryServer) -> None:
    with psycopg.connect(conninfo(server), autocommit=True) as c:
        with pytest.raises(errors.SyntaxError) as info:
            c.execute("SELECT 1; SELEC 2")
        assert info.value.diag.message_primary == 'syntax error at or near "SELEC"'
        assert info.value.diag.statement_position == "11"
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_timeout_while_rows_stream_is_57014_and_fails_the_transaction(
    server: QueryServer,
) -> None:
    with psycopg.connect(conninfo(server)) as c:  # not autocommit: a transaction block
        c.execute("SET statement_timeout = '300ms'")
        received = 0
        with pytest.raises(errors.QueryCanceled, match="statement timeout"):
            for _ in c.cursor().stream("SELECT * FROM range(50000000) t(i)"):
                received += 1
                if received == 1:
                    time.sleep(0.8)  # the server blocks sending; the timeout fires
        assert received > 0  # it fired while the rows streamed
        with pytest.raises(errors.InFailedSqlTransaction):
            c.execute("SELECT 1")
        c.rollback()
        assert c.execute("SELECT count(*) FROM items").fetchone() == (ITEM_ROWS,)
