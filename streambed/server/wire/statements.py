"""Statement boundaries, read with the Postgres scanner (pglast), never by substring: how a
simple Query splits into statements and how many `$n` placeholders a statement has.
"""

from __future__ import annotations

import contextlib

from pglast import parser

from streambed.server import sqlparse


def split(sql: str) -> list[str]:
    """Statements of a simple Query, without empty ones. Scanner-based, so DuckDB-only syntax
    splits too; text the scanner rejects (an unterminated quote) is one statement, and the
    database reports its syntax error."""
    try:
        return [s for s in sqlparse.split(sql, with_parser=False) if s.strip()]
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
