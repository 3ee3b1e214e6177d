"""Names Postgres accepts bare that DuckDB's parser does not.

Some words are keywords in DuckDB but not reserved in Postgres (`by`, `at`, `columns`,
`qualify`, `map`, ...): `select by from t` is fine in Postgres, a syntax error in DuckDB. The
set is every word DuckDB does not take as a bare name (`duckdb_keywords()`, all but its
unreserved ones) that Postgres does take: not reserved nor only a type or function name in
pglast's keyword lists (taken from Postgres's own), and printed bare by pglast. Statements
naming one are printed from their parse tree with those names double-quoted where they are
identifiers (columns, select-list names, aliases, tables), never where they are function or
type names.
"""

from __future__ import annotations

import functools
from typing import Any

import duckdb
from pglast import ast
from pglast.keywords import RESERVED_KEYWORDS, TYPE_FUNC_NAME_KEYWORDS
from pglast.stream import RawStream, maybe_double_quote_name

# Where a bare name is an identifier (not a function or type name).
_IDENTIFIER_PARENTS = frozenset({"ColumnRef", "ResTarget", "Alias", "RangeVar"})


@functools.cache
def duckdb_only_keywords() -> frozenset[str]:
    """Words DuckDB does not take as a bare column or table name and Postgres does."""
    with duckdb.connect() as conn:
        rows = conn.execute(
            "SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category <> 'unreserved'"
        ).fetchall()
    postgres = set(RESERVED_KEYWORDS) | set(TYPE_FUNC_NAME_KEYWORDS)
    names = {str(r[0]) for r in rows} - postgres
    return frozenset(n for n in names if maybe_double_quote_name(n) == n)


def is_keyword(name: str | None) -> bool:
    return name is not None and name in duckdb_only_keywords()


def names_keyword(node: Any) -> bool:
    """Whether `node` itself names something with one of `duckdb_only_keywords`."""
    if isinstance(node, ast.ColumnRef):
        return any(isinstance(f, ast.String) and is_keyword(f.sval) for f in node.fields or ())
    if isinstance(node, ast.ResTarget):
        return is_keyword(node.name)
    if isinstance(node, ast.Alias):
        names = [
            node.aliasname,
            *(c.sval for c in node.colnames or () if isinstance(c, ast.String)),
        ]
        return any(is_keyword(n) for n in names)
    if isinstance(node, ast.RangeVar):
        return is_keyword(node.relname) or is_keyword(node.schemaname)
    return False


class QuotingStream(RawStream):
    """pglast's printer, double-quoting identifiers DuckDB would read as keywords."""

    def __init__(self) -> None:
        super().__init__()
        self._parents: list[str] = []

    def print_node(self, node: Any, is_name: bool = False, is_symbol: bool = False) -> None:
        if not isinstance(node, ast.Node):
            super().print_node(node, is_name, is_symbol)
            return
        self._parents.append(type(node).__name__)
        try:
            super().print_node(node, is_name, is_symbol)
        finally:
            self._parents.pop()

    def _print_scalar(self, value: Any, is_name: bool, is_symbol: bool) -> None:
        if is_name and not is_symbol and isinstance(value, str) and is_keyword(value):
            parents = [p for p in self._parents if p != "String"]
            if parents and parents[-1] in _IDENTIFIER_PARENTS:
                self.write('"' + value + '"')
                return
        super()._print_scalar(value, is_name, is_symbol)  # type: ignore[misc]
