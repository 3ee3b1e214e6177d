"""`streambed.server.sqlparse`: every parse on one long-lived thread, whichever thread asks
(libpg_query keeps a pthread key per thread that parses), also in a forked child."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from pglast import parser

from streambed.server import sqlparse


def _parsed_on() -> str:
    names: list[str] = []

    def record(sql: str) -> tuple[object, ...]:
        names.append(threading.current_thread().name)
        return ()

    sqlparse._run(record, "SELECT 1")
    return names[0]


def test_every_thread_parses_on_the_same_parser_thread() -> None:
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(_parsed_on())) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen.append(_parsed_on())
    assert len(set(seen)) == 1 and seen[0].startswith("streambed-sql-parser")


def test_results_and_errors_reach_the_caller() -> None:
    (statement,) = sqlparse.parse_sql("SELECT a FROM t WHERE b = $1")
    assert type(statement.stmt).__name__ == "SelectStmt"
    assert sqlparse.split("SELECT 1; SELECT ';'", with_parser=False) == ["SELECT 1", "SELECT ';'"]
    assert [t.name for t in sqlparse.scan("SELECT $2")][-1] == "PARAM"
    with pytest.raises(parser.ParseError, match="syntax error"):
        sqlparse.parse_sql("SELEC 1")


def test_a_forked_child_parses_too() -> None:
    sqlparse.parse_sql("SELECT 1")  # the parent's parser thread is running
    pid = os.fork()
    if pid == 0:  # the child: exits 0 only if it could parse, and never hangs
        ok = False
        try:
            signal.alarm(10)
            ok = len(sqlparse.parse_sql("SELECT 2")) == 1
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
