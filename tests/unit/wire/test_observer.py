"""What the handler tells its observer (the query metrics): one statement per SQL statement
run, whichever protocol ran it and however it ended, and each error by SQLSTATE."""

from __future__ import annotations

import pytest

from streambed.server.wire import messages
from streambed.server.wire.auth import UserStore
from streambed.server.wire.handler import ConnectionHandler, Database
from tests.unit.wire.test_handler import SYNC, bind, execute, parse, query, run


class Seen:
    def __init__(self) -> None:
        self.statements: list[float] = []
        self.errors: list[str] = []

    def statement(self, seconds: float) -> None:
        self.statements.append(seconds)

    def error(self, sqlstate: str) -> None:
        self.errors.append(sqlstate)


CASES = [
    ("one simple query", query("select 1"), 1, []),
    ("two statements in one query", query("select 1; select 2"), 2, []),
    ("a failing statement ends the query", query("select 1/0; select 2"), 1, ["22012"]),
    ("an unknown table", query("select * from nowhere"), 1, ["42P01"]),
    ("an empty query", query(""), 0, []),
    (
        "extended, its rows in two executes",
        parse("select * from range(3)") + bind() + execute(max_rows=2) + execute() + SYNC,
        1,
        [],
    ),
    ("extended, failing", parse("select 1/0") + bind() + execute() + SYNC, 1, ["22012"]),
    ("a parse error is no statement", parse("select 1; select 2") + SYNC, 0, ["42601"]),
]


@pytest.mark.parametrize(
    ("stream", "statements", "errors"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_observed(database: Database, stream: bytes, statements: int, errors: list[str]) -> None:
    seen = Seen()
    handler = ConnectionHandler(database, UserStore({}), process_id=7, secret_key=9, observer=seen)
    handler.startup(messages.StartupMessage({"user": "alice"}))
    try:
        run(handler, stream)
    finally:
        handler.close()
    assert len(seen.statements) == statements
    assert all(s >= 0 for s in seen.statements)
    assert seen.errors == errors
