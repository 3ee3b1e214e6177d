"""Postgres numeric semantics for avg() and division in the select list.

Postgres's avg() of an integer or numeric column is `numeric`, and so is a division where one
side is numeric and neither is a float: the exact quotient, rounded at the scale
`select_div_scale` picks (16 significant digits, at least the operands' scales:
1.5000000000000000, 12345.678901234568, 0.66666666666666666667). DuckDB answers both in
`double precision`. Which one a query needs depends on the operands' types, which only
binding knows: for every select-list item that is `avg(x)` or `x / y` (bare or inside
`round(..., n)`), the query is bound twice without running it, once with `sum(x)` and `x`
in those places and once with `y`. Where the types are exact, the item becomes
`sb_avg_exact(<sum's unscaled integer>, k, count(x))` (same DISTINCT / FILTER / OVER) or
`sb_div_exact(<x unscaled>, kx, <y unscaled>, ky)`; integer / integer stays integer division
and anything involving floats or intervals stays as DuckDB computes it, as in Postgres.

The exact result is DECIMAL(38, 20): every value equals Postgres's, rounded half away from
zero at Postgres's scale; the text shows the column's 20 decimals (Postgres: 16 for
1.5000000000000000) unless round(..., n) fixes the scale. Quotients below 0.0001 (where
Postgres keeps more than 20 decimals) are rounded at 20; quotients of 10^18 or more overflow.
avg() or division inside a larger expression (`avg(x) * 100`, `a / b > 1`, a subquery)
stays double precision.
"""

from __future__ import annotations

import re

import duckdb
from pglast import ast, enums

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
-- x / y of exact numbers given as unscaled integers and scales (numeric division)
CREATE MACRO {s}.sb_div_scale2(vx, kx, vy, ky) AS least({SCALE}, greatest(kx, ky, 16 - 4 * (
    {s}.sb_nweight(vx) - {s}.sb_nweight(vy)
    - CASE WHEN {s}.sb_nfirst(vx) <= {s}.sb_nfirst(vy) THEN 1 ELSE 0 END)));
CREATE MACRO {s}.sb_div_scaled(ux, kx, uy, ky, r) AS
    ({s}.sb_round_div(ux * {s}.sb_pow10(ky + r - kx) * sign(uy), abs(uy))
     * {s}.sb_pow10({SCALE} - r))::DECIMAL(38,0) * 0.{"0" * (SCALE - 1)}1;
CREATE MACRO {s}.sb_div_exact(ux, kx, uy, ky) AS CASE
    WHEN uy = 0 THEN error('division by zero')
    ELSE {s}.sb_div_scaled(ux, kx, uy, ky, {s}.sb_div_scale2(
        abs(ux::DOUBLE) / pow(10, kx), kx, abs(uy::DOUBLE) / pow(10, ky), ky)) END;
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


def _is_div(node: object) -> bool:
    return (
        isinstance(node, ast.A_Expr)
        and node.kind == enums.A_Expr_Kind.AEXPR_OP
        and node.lexpr is not None
        and [n.sval for n in node.name or () if isinstance(n, ast.String)][-1:] == ["/"]
    )


def _core(target: object) -> ast.Node | None:
    """The avg(x) or x / y a select-list item is, bare or as round(..., n)."""
    value = target.val if isinstance(target, ast.ResTarget) else None
    if isinstance(value, ast.FuncCall) and _name(value) == "round" and value.args:
        value = value.args[0]
    return value if _is_avg(value) or _is_div(value) else None


def _set_core(target: ast.ResTarget, node: ast.Node) -> None:
    value = target.val
    if isinstance(value, ast.FuncCall) and _name(value) == "round" and value.args:
        value.args = (node, *value.args[1:])
    else:
        target.val = node


def targets(stmt: ast.Node) -> dict[int, ast.Node]:
    """Select-list positions whose item is avg(x) or x / y (bare or in round), with that
    node; empty when a `*` item makes positions unknown."""
    if not isinstance(stmt, ast.SelectStmt) or stmt.op != 0 or not stmt.targetList:
        return {}
    found: dict[int, ast.Node] = {}
    for i, target in enumerate(stmt.targetList):
        value = target.val if isinstance(target, ast.ResTarget) else None
        if isinstance(value, ast.ColumnRef) and isinstance((value.fields or ())[-1], ast.A_Star):
            return {}
        core = _core(target)
        if core is not None:
            found[i] = core
    return found


def probe(stmt: ast.SelectStmt, operand: str) -> None:
    """Turn the found items into what binding tells the types by, in place: avg(x) into
    sum(x), x / y into x (operand "left") or y ("right")."""
    for i, core in targets(stmt).items():
        target = (stmt.targetList or ())[i]
        assert isinstance(target, ast.ResTarget)
        if isinstance(core, ast.FuncCall):
            core.funcname = (ast.String(sval="sum"),)
        elif isinstance(core, ast.A_Expr):
            side = core.lexpr if operand == "left" else core.rexpr
            assert isinstance(side, ast.Node)
            _set_core(target, side)


_DECIMAL = re.compile(r"DECIMAL\(\d+,\s*(\d+)\)")
_INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT"}


def exact_scale(duckdb_type: str) -> int | None:
    """The scale of an exact type (integers: 0, DECIMAL(p, k): k), None for the others."""
    if duckdb_type in _INTEGERS:
        return 0
    match = _DECIMAL.fullmatch(duckdb_type)
    return int(match.group(1)) if match else None


def _cast(node: ast.Node, type_name: str) -> ast.TypeCast:
    return ast.TypeCast(
        arg=node, typeName=ast.TypeName(names=(ast.String(sval=type_name),), typemod=-1)
    )


def _call(name: str, *args: ast.Node, schema: str | None = None) -> ast.FuncCall:
    names = (ast.String(sval=schema),) if schema else ()
    return ast.FuncCall(funcname=(*names, ast.String(sval=name)), args=args, funcformat=0)


def _int(value: int) -> ast.A_Const:
    return ast.A_Const(val=ast.Integer(ival=value))


def _unscaled(node: ast.Node, decimal: bool) -> ast.Node:
    """The integer behind an exact value: 1.50 (of scale 2) is 150."""
    if not decimal:
        return _cast(node, "hugeint")
    text = _call("replace", _cast(node, "varchar"), _text("."), _text(""))
    return _cast(text, "hugeint")


def _text(value: str) -> ast.A_Const:
    return ast.A_Const(val=ast.String(sval=value))


def _aggregate(call: ast.FuncCall, name: str, arg: ast.Node) -> ast.FuncCall:
    return ast.FuncCall(
        funcname=(ast.String(sval=name),),
        args=(arg,),
        agg_distinct=call.agg_distinct,
        agg_filter=call.agg_filter,
        over=call.over,
        funcformat=0,
    )


def exact(stmt: ast.SelectStmt, left: list[str], right: list[str]) -> bool:
    """Replace each found item whose operands are exact (`left`/`right`: the DuckDB types
    the probes bound at each position) by its exact numeric form. True if any changed."""
    changed = False
    for i, core in targets(stmt).items():
        target = (stmt.targetList or ())[i]
        assert isinstance(target, ast.ResTarget)
        if i >= len(left) or i >= len(right):
            return False
        if isinstance(core, ast.FuncCall):  # avg(x); left[i] is sum(x)'s type
            scale = exact_scale(left[i])
            if scale is None:
                continue
            (arg,) = core.args or ()
            total = _unscaled(_aggregate(core, "sum", arg), decimal=True)
            count = _aggregate(core, "count", arg)
            _set_core(target, _call("sb_avg_exact", total, _int(scale), count, schema=SCHEMA))
            changed = True
        elif isinstance(core, ast.A_Expr):  # x / y: numeric if both exact and one numeric
            kx, ky = exact_scale(left[i]), exact_scale(right[i])
            if kx is None or ky is None or (left[i] in _INTEGERS and right[i] in _INTEGERS):
                continue
            assert isinstance(core.lexpr, ast.Node) and isinstance(core.rexpr, ast.Node)
            x = _unscaled(core.lexpr, decimal=left[i] not in _INTEGERS)
            y = _unscaled(core.rexpr, decimal=right[i] not in _INTEGERS)
            _set_core(target, _call("sb_div_exact", x, _int(kx), y, _int(ky), schema=SCHEMA))
            changed = True
    return changed


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
