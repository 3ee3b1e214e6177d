"""Postgres's result types for `extract()` and `date_part()`.

Since Postgres 14, `extract(field FROM x)` is `numeric`: integral fields (year, month, dow,
hour, ...) at scale 0, `second` at scale 6 (30.500000), `milliseconds` at scale 3, `epoch`
at scale 6 for timestamps, times and intervals and 0 for dates. `date_part('field', x)`
stays `double precision`, with the fractional seconds. DuckDB answers both with BIGINT
(seconds truncated: 30) or DOUBLE. The rewrite (`streambed.server.rewrite`) replaces each
call by the expression here; the epoch of a date or an interval needs the argument's type,
which typed macro overloads pick at bind time.
"""

from __future__ import annotations

from pglast import ast

EPOCH_MACRO = "sb_extract_epoch"
MACROS_SQL = [
    # epoch: a date's is whole seconds; an interval's counts a year as 365.25 days and a
    # month as 30 (DuckDB's epoch(), as Postgres); the others are exact microseconds
    f"CREATE OR REPLACE MACRO {EPOCH_MACRO}(t DATE, x) AS CAST(epoch(x) AS DECIMAL(18,0)), "
    "(t INTERVAL, x) AS CAST(epoch(x) AS DECIMAL(18,6)), "
    "(t, x) AS CAST(epoch_us(x) AS DECIMAL(18,0)) * CAST(0.000001 AS DECIMAL(7,6))",
]

# fields Postgres answers with a fraction (scale), from DuckDB's microseconds
_MICROSECOND_FIELDS = {"second": 6, "seconds": 6, "millisecond": 3, "milliseconds": 3}
_UNCHANGED = {"julian"}  # DuckDB's own answer (a double)


def _string(node: object) -> str | None:
    if isinstance(node, ast.A_Const) and isinstance(node.val, ast.String):
        return (node.val.sval or "").lower()
    return None


def _func(name: str, *args: ast.Node) -> ast.FuncCall:
    return ast.FuncCall(funcname=(ast.String(sval=name),), args=args, funcformat=0)


def _cast(node: ast.Node, type_name: str, *typmods: int) -> ast.TypeCast:
    mods = tuple(ast.A_Const(val=ast.Integer(ival=m)) for m in typmods) or None
    return ast.TypeCast(
        arg=node,
        typeName=ast.TypeName(names=(ast.String(sval=type_name),), typmods=mods, typemod=-1),
    )


def _const(text: str) -> ast.A_Const:
    return ast.A_Const(val=ast.String(sval=text))


def _micros(value: ast.Node) -> ast.FuncCall:
    return _func("date_part", _const("microseconds"), value)


def extract(field_node: ast.Node, value: ast.Node) -> ast.Node | None:
    """`extract(field FROM value)` (arguments already rewritten) as Postgres types it, or
    None to leave it to DuckDB."""
    field = _string(field_node)
    if field is None or field in _UNCHANGED:
        return None
    if field == "epoch":
        return _func(EPOCH_MACRO, value, value)
    scale = _MICROSECOND_FIELDS.get(field)
    if scale is not None:
        # microseconds * 0.000001 (second) or * 0.001 (milliseconds): exact, at that scale
        unit = _cast(_const(f"{10**-scale:.{scale}f}"), "decimal", scale + 1, scale)
        return ast.A_Expr(
            kind=0,
            name=(ast.String(sval="*"),),
            lexpr=_cast(_micros(value), "decimal", 18, 0),
            rexpr=unit,
        )
    call = _func("date_part", _const(field), value)
    return _cast(call, "decimal", 18, 0)


def date_part(field_node: ast.Node, value: ast.Node) -> ast.Node | None:
    """`date_part('field', value)` as Postgres types it (double precision), or None."""
    field = _string(field_node)
    if field is None or field in _UNCHANGED:
        return None
    scale = _MICROSECOND_FIELDS.get(field)
    if scale is not None:
        micros = _cast(_micros(value), "double")
        divisor = ast.A_Const(val=ast.Integer(ival=10**scale))
        return ast.A_Expr(kind=0, name=(ast.String(sval="/"),), lexpr=micros, rexpr=divisor)
    return _cast(_func("date_part", _const(field), value), "double")
