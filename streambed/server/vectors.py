"""int2vector and oidvector, as Postgres's catalogs have them.

`pg_index.indkey`, `pg_proc.proargtypes` and their kind are vectors: subscripts start at 0
(`indkey[0]` is the first key column), the text form is space-separated ("1 2"), and
`= ANY(indkey)` tests membership. The catalog holds them as DuckDB lists (subscripts from
1), so the rewrite adds one to every subscript of such a column, and result columns taken
straight from one are described as int2vector/oidvector (`streambed.server.origins`), which
`streambed.server.pgtypes` renders space-separated.
"""

from __future__ import annotations

from pglast import ast

from streambed.server import pgtypes

# catalog relation -> its vector columns and their types
VECTOR_COLUMNS: dict[str, dict[str, pgtypes.PgType]] = {
    "pg_index": {
        "indkey": pgtypes.INT2VECTOR,
        "indcollation": pgtypes.OIDVECTOR,
        "indclass": pgtypes.OIDVECTOR,
        "indoption": pgtypes.INT2VECTOR,
    },
    "pg_proc": {"proargtypes": pgtypes.OIDVECTOR},
}
_NAMES = frozenset(name for columns in VECTOR_COLUMNS.values() for name in columns)


def is_vector_subscript(node: ast.Node) -> bool:
    """`node` subscripts a vector column (`i.indkey[0]`)."""
    if not isinstance(node, ast.A_Indirection) or not isinstance(node.arg, ast.ColumnRef):
        return False
    last = (node.arg.fields or ())[-1]
    if not isinstance(last, ast.String) or last.sval not in _NAMES:
        return False
    return any(isinstance(i, ast.A_Indices) for i in node.indirection or ())


def _plus_one(expr: ast.Node | None) -> ast.Node | None:
    if expr is None:
        return None
    one = ast.A_Const(val=ast.Integer(ival=1))
    return ast.A_Expr(kind=0, name=(ast.String(sval="+"),), lexpr=expr, rexpr=one)


def shift_subscripts(node: ast.A_Indirection) -> ast.A_Indirection:
    """`node` with its subscripts counted from 1 (DuckDB's lists) instead of 0."""
    items = []
    for item in node.indirection or ():
        if isinstance(item, ast.A_Indices):
            item = ast.A_Indices(
                is_slice=item.is_slice, lidx=_plus_one(item.lidx), uidx=_plus_one(item.uidx)
            )
        items.append(item)
    node.indirection = tuple(items)
    return node
