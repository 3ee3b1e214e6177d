"""Postgres numeric semantics for avg() in the select list.

Postgres's avg() of an integer or numeric column is `numeric`: the exact quotient sum / count
rounded at the scale `select_div_scale` picks (16 significant digits, at least the input's
scale: 1.5000000000000000, 12345.678901234568, 0.66666666666666666667). DuckDB's avg() is
`double precision`. Which one a query needs depends on the argument's type, which only
binding knows: for every `avg(x)` that is a select-list item (or `round(avg(x), n)`), the
query is bound once with `sum(x)` in its place (without running it). Where sum(x) is HUGEINT
(a sum of integers) or DECIMAL(38, k) (of numeric(p, k)), `avg(x)` becomes
`sb_avg_exact(<sum's unscaled integer>, k, count(x))` with the same DISTINCT / FILTER / OVER;
a sum of floats or intervals keeps DuckDB's avg(), which Postgres answers alike.

The exact result is DECIMAL(38, 20): every value equals Postgres's, rounded half away from
zero at Postgres's scale; the text shows the column's 20 decimals (Postgres: 16 for
1.5000000000000000) unless round(avg(x), n) fixes the scale. Quotients below 0.0001 (where
Postgres keeps more than 20 decimals) are rounded at 20. avg() inside a larger expression
(`avg(x) * 100`, a subquery) stays double precision.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import duckdb
from pglast import ast

from streambed.server.catalog import SCHEMA

SCALE = 20  # decimals of an exact avg(): Postgres's largest for quotients of 0.0001 and more
_MAX_PRECISION = 38


def _macros() -> str:
    pow10 = ", ".join(f"{10**e}::HUGEINT" for e in range(_MAX_PRECISION + 1))
    s = SCHEMA
    return f"""
CREATE MACRO {s}.sb_pow10(e) AS [{pow10}][e + 1];
-- base-10000 weight and first digit of a positive value, as Postgres's NumericVar has them
CREATE MACRO {s}.sb_nweight(x) AS
    CASE WHEN x = 0 THEN 0 ELSE floor(log10(x) / 4 + 1e-12)::INTEGER END;
CREATE MACRO {s}.sb_nfirst(x) AS
    CASE WHEN x = 0 THEN 0 ELSE floor(x / pow(10000, {s}.sb_nweight(x)) + 1e-9) END;
-- select_div_scale(sum, count): 16 significant digits, at least the dividend's scale
CREATE MACRO {s}.sb_div_scale(v, k, n) AS least({SCALE}, greatest(k, 16 - 4 * (
    {s}.sb_nweight(v) - {s}.sb_nweight(n)
    - CASE WHEN {s}.sb_nfirst(v) <= {s}.sb_nfirst(n) THEN 1 ELSE 0 END)));
CREATE MACRO {s}.sb_round_div(a, b) AS sign(a) * ((abs(a) * 2 + b) // (2 * b));
CREATE MACRO {s}.sb_avg_scaled(u, k, n, r) AS
    ({s}.sb_round_div(u * {s}.sb_pow10(r - k), n) * {s}.sb_pow10({SCALE} - r))::DECIMAL(38,0)
    * 0.{"0" * (SCALE - 1)}1;
-- u: the sum's unscaled integer, k: its scale, n: the count
CREATE MACRO {s}.sb_avg_exact(u, k, n) AS CASE WHEN n = 0 THEN NULL ELSE {s}.sb_avg_scaled(
    u, k, n, {s}.sb_div_scale(abs(u::DOUBLE) / pow(10, k), k, n::DOUBLE)) END;
"""


def install(conn: duckdb.DuckDBPyConnection) -> None:
    """Create the macros (once, at startup, after the catalog schema exists)."""
    conn.execute(_macros())


# ---- the rewrite ----------------------------------------------------------------------------


def _name(call: ast.FuncCall) -> str:
    names = [n.sval or "" for n in call.funcname or () if isinstance(n, ast.String)]
    return (names[-1] if names else "").lower()


def _is_avg(node: object) -> bool:
    return (
        isinstance(node, ast.FuncCall)
        and _name(node) == "avg"
        and len(node.args or ()) == 1
        and not node.agg_star
    )


def avg_targets(stmt: ast.Node) -> list[ast.FuncCall]:
    """The avg(x) calls that are select-list items, bare or as round(avg(x), n)."""
    if not isinstance(stmt, ast.SelectStmt) or stmt.op != 0 or not stmt.targetList:
        return []
    calls: list[ast.FuncCall] = []
    for target in stmt.targetList:
        value = target.val if isinstance(target, ast.ResTarget) else None
        if _is_avg(value):
            assert isinstance(value, ast.FuncCall)
            calls.append(value)
        elif (
            isinstance(value, ast.FuncCall)
            and _name(value) == "round"
            and value.args
            and _is_avg(value.args[0])
        ):
            inner = value.args[0]
            assert isinstance(inner, ast.FuncCall)
            calls.append(inner)
    return calls


def as_sum(call: ast.FuncCall) -> None:
    """Turn avg(x) into sum(x) in place (the probe that tells x's type)."""
    call.funcname = (ast.String(sval="sum"),)


_DECIMAL = re.compile(r"DECIMAL\(\d+,\s*(\d+)\)")


def exact_scale(sum_type: str) -> int | None:
    """The scale of an exact sum (HUGEINT: 0, DECIMAL(38, k): k), None for floats etc."""
    if sum_type in ("HUGEINT", "BIGINT", "INTEGER", "UHUGEINT"):
        return 0
    match = _DECIMAL.fullmatch(sum_type)
    return int(match.group(1)) if match else None


def _aggregate(call: ast.FuncCall, name: str, arg: ast.Node) -> ast.FuncCall:
    return ast.FuncCall(
        funcname=(ast.String(sval=name),),
        args=(arg,),
        agg_distinct=call.agg_distinct,
        agg_filter=call.agg_filter,
        over=call.over,
        funcformat=0,
    )


def exact_avg(call: ast.FuncCall, scale: int) -> ast.FuncCall:
    """sb_avg_exact(unscaled sum, scale, count) for avg(x) of an exact type."""
    (arg,) = call.args or ()
    total: ast.Node = ast.TypeCast(
        arg=_aggregate(call, "sum", arg),
        typeName=ast.TypeName(names=(ast.String(sval="varchar"),), typemod=-1),
    )
    unscaled = ast.TypeCast(
        arg=ast.FuncCall(
            funcname=(ast.String(sval="replace"),),
            args=(total, _text("."), _text("")),
            funcformat=0,
        ),
        typeName=ast.TypeName(names=(ast.String(sval="hugeint"),), typemod=-1),
    )
    return ast.FuncCall(
        funcname=(ast.String(sval=SCHEMA), ast.String(sval="sb_avg_exact")),
        args=(unscaled, ast.A_Const(val=ast.Integer(ival=scale)), _aggregate(call, "count", arg)),
        funcformat=0,
    )


def _text(value: str) -> ast.A_Const:
    return ast.A_Const(val=ast.String(sval=value))


def replace_targets(stmt: ast.SelectStmt, replace: Callable[[ast.FuncCall], ast.Node]) -> None:
    """Swap each select-list avg(x) (bare or inside round) for `replace(call)`."""
    for target in stmt.targetList or ():
        if not isinstance(target, ast.ResTarget):
            continue
        value = target.val
        if _is_avg(value):
            assert isinstance(value, ast.FuncCall)
            target.val = replace(value)
        elif isinstance(value, ast.FuncCall) and _name(value) == "round" and value.args:
            first = value.args[0]
            if _is_avg(first):
                assert isinstance(first, ast.FuncCall)
                value.args = (replace(first), *value.args[1:])


def null_params(node: object) -> None:
    """Replace every $n in a parse tree with NULL, in place (a probe binds without values)."""
    if isinstance(node, tuple | list):
        for item in node:
            null_params(item)
        return
    if not isinstance(node, ast.Node):
        return
    for attr in node:
        value = getattr(node, attr)
        if isinstance(value, ast.ParamRef):
            setattr(node, attr, ast.A_Const(isnull=True))
        elif isinstance(value, tuple) and any(isinstance(v, ast.ParamRef) for v in value):
            null = ast.A_Const(isnull=True)
            setattr(node, attr, tuple(null if isinstance(v, ast.ParamRef) else v for v in value))
        null_params(getattr(node, attr))
