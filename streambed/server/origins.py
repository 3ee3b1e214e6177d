"""Which result columns of a SELECT are taken straight from a table.

Postgres's RowDescription gives, for a result column that is a plain reference to a table
column, the table's OID and the column's number (pgjdbc's `getTableName`, `isNullable`,
psqlODBC's column attributes read them), and the column's declared type. `result_origins`
works this out from the parse tree: a top-level `SELECT` whose targets are column
references (`col`, `t.col`, `*`, `t.*`) over tables in `FROM` (joins included). Anything
else (expressions, subqueries, set operations, CTEs) has no origin, as in Postgres for
expressions. When the number of result columns cannot be told (a `*` over a subquery or
a `USING` join), no column gets one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pglast import ast, enums

from streambed.server import pgtypes


@dataclass(frozen=True)
class ColumnOrigin:
    table_oid: int
    column_number: int
    pg_type: pgtypes.PgType | None = None  # the type to show, when not DuckDB's own
    stored_type: str | None = None  # the DuckDB type `pg_type` applies to


Columns = Sequence[tuple[str, ColumnOrigin]]
Lookup = Callable[[str | None, str], Columns | None]


@dataclass
class _Scope:
    names: tuple[str, ...]  # what the relation answers to: its alias, or its name
    columns: Columns | None  # None: unknown (a subquery, a function, a CTE)


class _Unknown(Exception):
    """The number of result columns cannot be told."""


def result_origins(stmt: ast.Node, lookup: Lookup) -> list[ColumnOrigin | None] | None:
    """One entry per result column of `stmt` (None: no origin); None when unknown."""
    if not isinstance(stmt, ast.SelectStmt) or stmt.op != enums.SetOperation.SETOP_NONE:
        return None
    if not stmt.targetList or stmt.valuesLists:
        return None
    ctes = {c.ctename for c in (stmt.withClause.ctes if stmt.withClause else ()) or ()}
    scopes: list[_Scope] = []
    merged = False
    try:
        for item in stmt.fromClause or ():
            merged = _from_item(item, lookup, ctes, scopes) or merged
        out: list[ColumnOrigin | None] = []
        for target in stmt.targetList:
            value = target.val if isinstance(target, ast.ResTarget) else None
            if not isinstance(value, ast.ColumnRef):
                out.append(None)
                continue
            fields = value.fields or ()
            qualifier = [f.sval or "" for f in fields[:-1] if isinstance(f, ast.String)]
            if isinstance(fields[-1], ast.A_Star):
                if not qualifier and merged:
                    raise _Unknown
                chosen = _matching(scopes, qualifier[-1]) if qualifier else scopes
                for scope in chosen:
                    if scope.columns is None:
                        raise _Unknown
                    out.extend(origin for _, origin in scope.columns)
                if qualifier and not chosen:
                    raise _Unknown
                continue
            name = fields[-1].sval if isinstance(fields[-1], ast.String) else None
            candidates = _matching(scopes, qualifier[-1]) if qualifier else scopes
            found = [o for s in candidates for n, o in s.columns or () if n == name]
            out.append(found[0] if len(found) == 1 else None)
    except _Unknown:
        return None
    return out


def _matching(scopes: list[_Scope], name: str) -> list[_Scope]:
    return [s for s in scopes if name in s.names]


def _from_item(item: ast.Node, lookup: Lookup, ctes: set[str], scopes: list[_Scope]) -> bool:
    """Add the relations of one FROM item; True when its columns merge (USING, NATURAL)."""
    if isinstance(item, ast.RangeVar):
        name = item.relname or ""
        columns = None
        if not (item.schemaname is None and name in ctes):
            columns = lookup(item.schemaname, name)
        alias = item.alias
        if alias is not None and alias.colnames and columns is not None:
            renamed = [c.sval or "" for c in alias.colnames if isinstance(c, ast.String)]
            columns = [
                (renamed[i] if i < len(renamed) else n, o) for i, (n, o) in enumerate(columns)
            ]
        names = (alias.aliasname or "",) if alias is not None else (name,)
        scopes.append(_Scope(names, columns))
        return False
    if isinstance(item, ast.JoinExpr):
        if item.alias is not None or item.larg is None or item.rarg is None:
            raise _Unknown
        merged = _from_item(item.larg, lookup, ctes, scopes)
        merged = _from_item(item.rarg, lookup, ctes, scopes) or merged
        return merged or bool(item.usingClause) or bool(item.isNatural)
    alias = getattr(item, "alias", None)
    scopes.append(_Scope((alias.aliasname or "",) if alias is not None else (), None))
    return False
