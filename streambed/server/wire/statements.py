"""Statement boundaries, read with the Postgres parser and scanner (pglast), never by
substring: how a simple Query splits into statements and how many `$n` placeholders a
statement has.
"""

from __future__ import annotations

import contextlib

from pglast import parser

from streambed.server import sqlparse


def split(sql: str) -> list[str]:
    """Statements of a simple Query, without empty ones, split by the Postgres parser. Text
    it cannot parse anywhere in the string stays one statement, so the database answers it
    with Postgres's syntax error (and position) and, as in Postgres, no part of it runs."""
    try:
        return [s for s in sqlparse.split(sql) if s.strip()]
    except parser.ParseError:
        return [sql] if sql.strip() else []


def placeholder_count(sql: str) -> int:
    """Highest $n placeholder in the statement (ignores strings and comments)."""
    try:
        tokens = sqlparse.scan(sql)
    except parser.ParseError:
        return 0
    highest = 0
    for token in tokens:
        if token.name == "PARAM":
            with contextlib.suppress(ValueError):
                highest = max(highest, int(sql[token.start + 1 : token.end + 1]))
    return highest
