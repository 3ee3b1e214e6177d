"""Names Postgres accepts bare that DuckDB's parser does not.

Some words are keywords in DuckDB but not reserved in Postgres (`by`, `at`, `columns`,
`qualify`, ...): `select by from t` is fine in Postgres, a syntax error in DuckDB. The set is
what DuckDB calls reserved or type/function keywords (`duckdb_keywords()`) minus what
Postgres reserves or allows only as a type or function name (pglast's keyword lists, taken
from Postgres's own). Statements naming one are printed from their parse tree with those
names in double quotes.
"""

from __future__ import annotations

import functools
from typing import Any

import duckdb
from pglast import ast
from pglast.keywords import RESERVED_KEYWORDS, TYPE_FUNC_NAME_KEYWORDS
from pglast.stream import RawStream


@functools.cache
def duckdb_only_keywords() -> frozenset[str]:
    """Words DuckDB does not take as a bare column or table name and Postgres does."""
    with duckdb.connect() as conn:
        rows = conn.execute(
            "SELECT keyword_name FROM duckdb_keywords() "
            "WHERE keyword_category IN ('reserved', 'type_function')"
        ).fetchall()
    postgres = set(RESERVED_KEYWORDS) | set(TYPE_FUNC_NAME_KEYWORDS)
    return frozenset(str(r[0]) for r in rows) - postgres


def needs_quoting(stmt: ast.Node) -> bool:
    """Whether `stmt` names something with one of `duckdb_only_keywords`."""
    words = duckdb_only_keywords()
    found = False

    def visit(node: Any) -> None:
        nonlocal found
        if found:
            return
        if isinstance(node, ast.String):
            found = node.sval in words
        elif isinstance(node, ast.ResTarget):
            found = node.name in words
        elif isinstance(node, ast.Alias):
            found = node.aliasname in words
        elif isinstance(node, ast.RangeVar):
            found = node.relname in words or node.schemaname in words

    _walk(stmt, visit)
    return found


def _walk(node: Any, visit: Any) -> None:
    if isinstance(node, tuple | list):
        for item in node:
            _walk(item, visit)
        return
    if not isinstance(node, ast.Node) or isinstance(node, ast.A_Const):
        return  # a constant's text is no name
    visit(node)
    for attr in node:
        value = getattr(node, attr)
        if isinstance(value, ast.Node | tuple | list):
            _walk(value, visit)


class QuotingStream(RawStream):
    """pglast's printer, also quoting names DuckDB would read as keywords."""

    def _print_scalar(self, value: Any, is_name: bool, is_symbol: bool) -> None:
        quote = is_name and not is_symbol and isinstance(value, str)
        if quote and value in duckdb_only_keywords():
            self.write('"' + value + '"')
            return
        super()._print_scalar(value, is_name, is_symbol)  # type: ignore[misc]
