"""Postgres numeric semantics for avg() and division in the select list.

Postgres's avg() of an integer or numeric column is `numeric`, and so is a division where one
side is numeric and neither is a float: the exact quotient, rounded at the scale
`select_div_scale` picks (16 significant digits, at least the operands' scales:
1.5000000000000000, 12345.678901234568, 0.66666666666666666667). DuckDB answers both in
`double precision`. Which one a query needs depends on the operands' types, which only
binding knows: for every select-list item that is `avg(x)` or `x / y` (bare or inside
`round(..., n)`) and is computed once per group or once per query (avg() without OVER, a
division of aggregates such as `sum(a) / count(*)`, or of constants), the query is bound
twice without running it, once with `sum(x)` and `x` in those places and once with `y`.
Where the types are exact, the item becomes
`sb_avg_exact(sum(x)::varchar, count(x))` (same DISTINCT / FILTER) or
`sb_div_exact(x::varchar, y::varchar)`: Python functions registered in DuckDB that divide
the unscaled integers exactly (macros doing the same in SQL cost DuckDB hundreds of
milliseconds to bind). Integer / integer stays integer division and anything involving
floats or intervals stays as DuckDB computes it, as in Postgres.

A bare item is `sb_avg_text` / `sb_div_text`: Postgres's text at Postgres's scale, which
varies by value (1.3333333333333333, 2.5000000000000000, 0.000000033333333333333333), in a
struct with a double that ORDER BY sorts by; the server sends the text as numeric without
typmod, like Postgres. Inside round(..., n) the item is DECIMAL(38, 20) (quotients below
0.0001 rounded at 20 decimals first; 10^18 or more fail with numeric field overflow), so
round fixes the scale. avg() or division inside a larger expression (`avg(x) * 100`,
`a / b > 1`, a subquery) and per-row computations (`amount / 3`, `avg(x) OVER (...)`: the
exact function costs microseconds per row) stay double precision.

`sum(x)` anywhere becomes `sb_sum_result(x, sum(x))`, a macro whose typed overloads make the
sum of int2/int4 bigint (Postgres's type; past 2^63 the cast raises) and leave the others as
DuckDB sums them.
"""

from __future__ import annotations

import re

import duckdb
import duckdb.func
import pyarrow as pa
from pglast import ast, enums

SUM_MACRO = "sb_sum_result"
# sb_sum_result(x, sum(x)): Postgres's type for the sum of x (int2/int4: bigint, the rest
# as DuckDB sums them). Typed macro overloads are resolved at bind time, so a sum anywhere
# in a query (subquery, CTE, HAVING, window, inside an expression) gets it without probing.
SUM_MACRO_SQL = (
    f"CREATE OR REPLACE MACRO {SUM_MACRO}(x SMALLINT, total) AS CAST(total AS BIGINT), "
    "(x INTEGER, total) AS CAST(total AS BIGINT), (x, total) AS total"
)

SCALE = 20  # decimals of an exact result: Postgres's largest for quotients of 0.0001 and more
_LIMIT = 10**38  # DECIMAL(38, SCALE) holds unscaled values below this
RESULT_TYPE = f"DECIMAL(38,{SCALE})"
_MAX_DISPLAY_SCALE = 1000  # Postgres's NUMERIC_MAX_DISPLAY_SCALE
# A bare avg()/division item: Postgres's text (its scale varies by value) and a double that
# ORDER BY sorts by. The server sends the text as numeric with typmod -1.
TEXT_FIELD = "sb_numeric_text"
ORDER_FIELD = "sb_numeric_order"
TEXT_RESULT_TYPE = f"STRUCT({ORDER_FIELD} DOUBLE, {TEXT_FIELD} VARCHAR)"


def _parse(text: str) -> tuple[int, int]:
    """(unscaled integer, scale) of DuckDB's text form of an integer or decimal: "-1.50"
    is (-150, 2)."""
    negative = text.startswith("-")
    whole, _, fraction = text.lstrip("+-").partition(".")
    unscaled = int(whole + fraction)
    return (-unscaled if negative else unscaled), len(fraction)


def _weight_and_first_digit(magnitude: int, scale: int) -> tuple[int, int]:
    """Base-10000 weight and leading base-10000 digit of magnitude * 10^-scale, as
    Postgres's NumericVar has them (zero: 0, 0)."""
    if magnitude == 0:
        return 0, 0
    weight = (len(str(magnitude)) - 1 - scale) // 4
    shift = scale + 4 * weight
    first = magnitude // 10**shift if shift >= 0 else magnitude * 10**-shift
    return weight, first


def quotient(ux: int, kx: int, uy: int, ky: int) -> tuple[int, int]:
    """x / y for x = ux * 10^-kx and y = uy * 10^-ky as Postgres's numeric division answers
    it: (unscaled, scale) at the scale select_div_scale picks (16 significant digits, at
    least both scales, at most 1000), rounded half away from zero."""
    if uy == 0:
        raise ValueError("division by zero")
    w1, f1 = _weight_and_first_digit(abs(ux), kx)
    w2, f2 = _weight_and_first_digit(abs(uy), ky)
    qweight = w1 - w2 - (1 if f1 <= f2 else 0)
    rscale = min(max(16 - 4 * qweight, kx, ky, 0), _MAX_DISPLAY_SCALE)
    value, remainder = divmod(abs(ux) * 10 ** (ky + rscale - kx), abs(uy))
    if 2 * remainder >= abs(uy):
        value += 1
    return (-value if (ux < 0) != (uy < 0) else value), rscale


def divide(ux: int, kx: int, uy: int, ky: int) -> int:
    """`quotient` at SCALE decimals (padded, or rounded half away from zero), unscaled."""
    return _rescale(*quotient(ux, kx, uy, ky))


def _rescale(value: int, scale: int) -> int:
    if scale <= SCALE:
        return int(value * 10 ** (SCALE - scale))
    unit = int(10 ** (scale - SCALE))
    kept, dropped = divmod(abs(value), unit)
    if 2 * dropped >= unit:
        kept += 1
    return -kept if value < 0 else kept


def text(unscaled: int, scale: int) -> str:
    """Postgres's text form of unscaled * 10^-scale: plain notation, `scale` decimals."""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    sign = "-" if unscaled < 0 else ""
    if scale == 0:
        return sign + digits
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def _decimal_array(values: list[int | None]) -> pa.Array:
    if any(v is not None and not -_LIMIT < v < _LIMIT for v in values):
        raise ValueError(
            f"numeric field overflow: the exact result needs more than {38 - SCALE} digits "
            f"before the decimal point (cast an operand to double precision)"
        )
    data = b"".join((v or 0).to_bytes(16, "little", signed=True) for v in values)
    validity = None
    if any(v is None for v in values):
        validity = pa.array([v is not None for v in values]).buffers()[1]
    return pa.Array.from_buffers(
        pa.decimal128(38, SCALE), len(values), [validity, pa.py_buffer(data)]
    )


def _text_array(values: list[tuple[int, int] | None]) -> pa.Array:
    texts = [None if v is None else text(*v) for v in values]
    order = pa.array([None if t is None else float(t) for t in texts], pa.float64())
    mask = pa.array([t is None for t in texts], pa.bool_())
    return pa.StructArray.from_arrays(
        [order, pa.array(texts, pa.string())], names=[ORDER_FIELD, TEXT_FIELD], mask=mask
    )


def _avg_quotients(total: pa.Array, count: pa.Array) -> list[tuple[int, int] | None]:
    out: list[tuple[int, int] | None] = []
    for value, n in zip(total.to_pylist(), count.to_pylist(), strict=True):
        out.append(None if value is None or not n else quotient(*_parse(value), n, 0))
    return out


def _div_quotients(left: pa.Array, right: pa.Array) -> list[tuple[int, int] | None]:
    out: list[tuple[int, int] | None] = []
    for x, y in zip(left.to_pylist(), right.to_pylist(), strict=True):
        out.append(None if x is None or y is None else quotient(*_parse(x), *_parse(y)))
    return out


def _at_scale(quotients: list[tuple[int, int] | None]) -> list[int | None]:
    return [None if q is None else _rescale(*q) for q in quotients]


def _avg_udf(total: pa.Array, count: pa.Array) -> pa.Array:
    return _decimal_array(_at_scale(_avg_quotients(total, count)))


def _div_udf(left: pa.Array, right: pa.Array) -> pa.Array:
    return _decimal_array(_at_scale(_div_quotients(left, right)))


def _avg_text_udf(total: pa.Array, count: pa.Array) -> pa.Array:
    return _text_array(_avg_quotients(total, count))


def _div_text_udf(left: pa.Array, right: pa.Array) -> pa.Array:
    return _text_array(_div_quotients(left, right))


def install(conn: duckdb.DuckDBPyConnection) -> None:
    """Register the exact avg and division functions and the sum macro (visible to every
    cursor)."""
    conn.execute(SUM_MACRO_SQL)
    result = duckdb.decimal_type(38, SCALE)
    as_text = duckdb.sqltype(TEXT_RESULT_TYPE)
    arrow = duckdb.func.ARROW
    conn.create_function("sb_avg_exact", _avg_udf, ["VARCHAR", "BIGINT"], result, type=arrow)
    conn.create_function("sb_div_exact", _div_udf, ["VARCHAR", "VARCHAR"], result, type=arrow)
    conn.create_function("sb_avg_text", _avg_text_udf, ["VARCHAR", "BIGINT"], as_text, type=arrow)
    conn.create_function("sb_div_text", _div_text_udf, ["VARCHAR", "VARCHAR"], as_text, type=arrow)


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
    if _is_avg(value) and isinstance(value, ast.FuncCall) and value.over is None:
        return value
    if _is_div(value) and (_aggregates(value) or not _columns(value)):
        return value
    return None


def _columns(node: object) -> bool:
    """True if the expression reads a column (constants are computed once)."""
    if isinstance(node, tuple | list):
        return any(_columns(item) for item in node)
    if not isinstance(node, ast.Node):
        return False
    if isinstance(node, ast.ColumnRef | ast.SubLink):
        return True
    return any(_columns(getattr(node, attr)) for attr in node)


_AGGREGATES = {"sum", "count", "avg", "min", "max"}


def _aggregates(node: object) -> bool:
    """True if the expression computes on aggregates (`sum(a) / count(*)`, a window
    function): one division per group, cheap enough for the exact Python function. A
    row-level `amount / 3` stays double precision (exact, it would cost microseconds per
    row)."""
    if isinstance(node, tuple | list):
        return any(_aggregates(item) for item in node)
    if not isinstance(node, ast.Node):
        return False
    if isinstance(node, ast.FuncCall) and (
        node.over is not None or node.agg_star or _name(node) in _AGGREGATES
    ):
        return True
    if isinstance(node, ast.SubLink):
        return False
    return any(_aggregates(getattr(node, attr)) for attr in node)


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
    the probes bound at each position) by its exact numeric form: Postgres's text for a
    bare item, DECIMAL(38, SCALE) inside round(). True if any changed."""
    changed = False
    for i, core in targets(stmt).items():
        target = (stmt.targetList or ())[i]
        assert isinstance(target, ast.ResTarget)
        if i >= len(left) or i >= len(right):
            return False
        form = "text" if target.val is core else "exact"
        if isinstance(core, ast.FuncCall):  # avg(x); left[i] is sum(x)'s type
            if exact_scale(left[i]) is None:
                continue
            (arg,) = core.args or ()
            total = _cast(_aggregate(core, "sum", arg), "varchar")
            _set_core(target, _call(f"sb_avg_{form}", total, _aggregate(core, "count", arg)))
            changed = True
        elif isinstance(core, ast.A_Expr):  # x / y: numeric if both exact and one numeric
            exact_operands = exact_scale(left[i]) is not None and exact_scale(right[i]) is not None
            if not exact_operands or (left[i] in _INTEGERS and right[i] in _INTEGERS):
                continue
            assert isinstance(core.lexpr, ast.Node) and isinstance(core.rexpr, ast.Node)
            x, y = _cast(core.lexpr, "varchar"), _cast(core.rexpr, "varchar")
            _set_core(target, _call(f"sb_div_{form}", x, y))
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
