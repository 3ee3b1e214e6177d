"""Postgres numeric semantics for avg() and division, anywhere in a query.

Postgres's avg() of an integer or numeric column is `numeric`, and so is a division where
one side is numeric and neither is a float: the exact quotient, rounded half away from zero
at the scale `select_div_scale` picks (16 significant digits, at least the operands' scales:
1.5000000000000000, 12345.678901234568, 0.66666666666666666667). DuckDB answers both in
`double precision`. Which one a query needs depends on the operands' types, which only
binding knows, so the rewrite (`streambed.server.rewrite`) turns every `x / y` into
`sb_div(x', y', x', y', x, y)` and every `avg(x)` into `sb_avg(x', x', sum(x), count(x),
avg(x))` (same DISTINCT, FILTER and OVER; x', y': the operands' type stand-ins): macros
whose typed overloads DuckDB picks at bind time. Integer
/ integer stays integer division, anything involving floats or intervals stays as DuckDB
computes it (as in Postgres), and the exact types (integers, HUGEINT sums, DECIMAL) go to
`sb_quotient`, a vectorized Python function (`streambed.server.numeric_batch`: int64 long
division in numpy, about a microsecond a row with the text; operands of 10^12 or more or
with more than 6 decimals, such as a nested quotient, take a scalar path, about ten). An
operand holding an aggregate (`sum(a) / count(*)`) gets a type stand-in without it in the
typed argument (`type_proxy`): DuckDB cannot type an aggregate there while it picks the
overload; a nested division's stand-in is `sb_div_type(x', y')`. The exact branch still
holds each operand twice, so DuckDB's binding doubles with each level of divisions of
divisions (8 levels: seconds).

Inside an expression (`avg(x) * 100`, `round(a / b, 2)`, `WHERE a / b > 1`, a CTE or
subquery column, a UNION arm) the quotient is DECIMAL(38, 20): Postgres's value, padded with
zeros to 20 decimals (quotients below 0.0001 are rounded at 20 decimals; 10^18 or more fail
with numeric field overflow). A bare select-list item of the outer query (`_text` variants)
is Postgres's text at Postgres's scale, which varies by value (1.3333333333333333,
2.5000000000000000, 0.000000033333333333333333), in a struct with a double that ORDER BY
sorts by; the server sends the text as numeric without typmod, like Postgres. When no ORDER
BY item can name it (`item_forms`), the item is `_operands` instead: the dividend and the
divisor as they are, and the server computes the same text from each batch. SELECT
DISTINCT and GROUP BY on a quotient use the DECIMAL form, so equal values are one.

`sum(x)` anywhere becomes `sb_sum_result(x, sum(x))`, a macro whose typed overloads make the
sum of int2/int4 bigint (Postgres's type; past 2^63 the cast raises) and leave the others as
DuckDB sums them (for a sum of an aggregate, x is its type stand-in). `x::numeric` without a
precision becomes `sb_to_numeric(x, x)`: a decimal unchanged, an integer DECIMAL(38, 0).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import duckdb
import duckdb.func
import pyarrow as pa
import pyarrow.compute as pc
from pglast import ast, enums

from streambed.server import numeric_batch

SUM_MACRO = "sb_sum_result"
# sb_sum_result(x, sum(x)): Postgres's type for the sum of x (int2/int4: bigint, the rest
# as DuckDB sums them). Typed macro overloads are resolved at bind time, so a sum anywhere
# in a query (subquery, CTE, HAVING, window, inside an expression) gets it without probing.
SUM_MACRO_SQL = (
    f"CREATE OR REPLACE MACRO {SUM_MACRO}(x SMALLINT, total) AS CAST(total AS BIGINT), "
    "(x INTEGER, total) AS CAST(total AS BIGINT), (x, total) AS total"
)

SCALE = 20  # decimals of the DECIMAL form: Postgres's largest for quotients of 0.0001 and more
# A bare avg()/division item: Postgres's text (its scale varies by value) and a double that
# ORDER BY sorts by. The server sends the text as numeric with typmod -1.
TEXT_FIELD = "sb_numeric_text"
ORDER_FIELD = "sb_numeric_order"
TEXT_RESULT_TYPE = f"STRUCT({ORDER_FIELD} DOUBLE, {TEXT_FIELD} VARCHAR)"


def _scale_of(value: str) -> str:
    """SQL for the scale of a DECIMAL expression's type (integers: 0), folded at bind time."""
    return f"coalesce(try_cast(regexp_extract(typeof({value}), ',(\\d+)\\)', 1) AS INTEGER), 0)"


def _quotient_sql(function: str, x: str, kx: str, y: str, ky: str) -> str:
    """SQL calling a quotient function on x and y (scales kx, ky): each as DECIMAL(38, 6)
    when its scale is at most 6, else as text. x and y appear twice each (one of the two
    is a constant-false branch): a nested division's macro expands once per appearance."""
    args = []
    for value, scale in ((x, kx), (y, ky)):
        fast = numeric_batch.FAST_SCALE
        args += [
            f"CASE WHEN {scale} <= {fast} THEN CAST({value} AS {numeric_batch.FAST_TYPE}) END",
            f"CASE WHEN {scale} > {fast} THEN CAST({value} AS VARCHAR) END",
            scale,
        ]
    return f"{function}({', '.join(args)})"


# A bare select-list item that ORDER BY does not sort by: the macro returns the operands as
# they are, in a struct, and the server computes Postgres's text from each batch it sends
# (`operand_texts`, the scales from the Arrow types). That spares the query the Python
# UDF's fixed cost per call and DuckDB the binding of the scale expressions (Q14: 3.7 ms).
DIVIDEND, DIVISOR = "sb_dividend", "sb_divisor"
OPERANDS_TYPE_PREFIX = f"STRUCT({DIVIDEND} "  # as DuckDB describes the struct's type


def _operands_sql(function: str, x: str, kx: str, y: str, ky: str) -> str:
    return f"struct_pack({DIVIDEND} := {x}, {DIVISOR} := {y})"


SUM_PROXY, AVG_PROXY, DIV_PROXY = "sb_sum_type", "sb_avg_type", "sb_div_type"
NONZERO = "sb_nonzero"
# Stand-ins with the type of sum(x), avg(x) and x / y (the exact ones with their scale) but
# without aggregates and without the division's own expansion: DuckDB cannot type an
# aggregate in a typed macro argument when it picks the overload, and a nested division
# written out again in the typed argument would double the query at every level.
_EXACT = "CAST(NULL AS DECIMAL(38,20))"
PROXY_MACROS_SQL = [
    f"CREATE OR REPLACE MACRO {SUM_PROXY}(x SMALLINT) AS CAST(x AS BIGINT), "
    "(x INTEGER) AS CAST(x AS BIGINT), (x BIGINT) AS CAST(x AS HUGEINT), (x) AS x",
    f"CREATE OR REPLACE MACRO {AVG_PROXY}(x DECIMAL) AS {_EXACT}, (x) AS x",
    f"CREATE OR REPLACE MACRO {DIV_PROXY}(tx BIGINT, ty BIGINT) AS CAST(NULL AS BIGINT), "
    f"(tx DECIMAL, ty DECIMAL) AS {_EXACT}, (tx BIGINT, ty DECIMAL) AS {_EXACT}, "
    f"(tx DECIMAL, ty BIGINT) AS {_EXACT}, (tx INTERVAL, ty) AS tx, "
    "(tx, ty) AS CAST(NULL AS DOUBLE)",
    # Postgres raises 22012 for a zero divisor unless the dividend is NULL
    f"CREATE OR REPLACE MACRO {NONZERO}(b, a) AS "
    "CASE WHEN b = 0 AND a IS NOT NULL THEN error('division by zero') ELSE b END",
]

TO_NUMERIC = "sb_to_numeric"
# x::numeric without a precision: a decimal stays as it is, integers become DECIMAL(38, 0),
# the rest DuckDB's NUMERIC (DECIMAL(18, 3))
TO_NUMERIC_SQL = (
    f"CREATE OR REPLACE MACRO {TO_NUMERIC}(tx BIGINT, x) AS CAST(x AS DECIMAL(38,0)), "
    "(tx DECIMAL, x) AS x, (tx, x) AS CAST(x AS DECIMAL(18,3))"
)

QUOTIENT = "sb_quotient"
QUOTIENT_TEXT = "sb_quotient_text"
DIV, DIV_TEXT, AVG, AVG_TEXT = "sb_div", "sb_div_text", "sb_avg", "sb_avg_text"
DIV_OPERANDS, AVG_OPERANDS = "sb_div_operands", "sb_avg_operands"
# what an avg()/division item computes: DECIMAL(38, 20) inside an expression; Postgres's
# text and a double to sort by for a bare select-list item; its operands for one that
# ORDER BY does not sort by (the server computes the text)
DECIMAL_FORM, TEXT_FORM, OPERANDS_FORM = "decimal", "text", "operands"
_FORMS = {
    DECIMAL_FORM: (DIV, AVG, QUOTIENT),
    TEXT_FORM: (DIV_TEXT, AVG_TEXT, QUOTIENT_TEXT),
    OPERANDS_FORM: (DIV_OPERANDS, AVG_OPERANDS, ""),
}


def macros_sql() -> list[str]:
    """The typed macros the rewrite calls: DuckDB picks the overload by the operands' types
    at bind time (int / int: integer division; exact types: the exact quotient; the rest:
    DuckDB's own `/` and avg). tx/ty: the operands' type stand-ins for the overload, px/py
    the same untyped (a typed parameter is cast: its scale would be lost)."""
    out = [SUM_MACRO_SQL, TO_NUMERIC_SQL, *PROXY_MACROS_SQL]
    params = "px, py, x, y"
    divided = f"x / {NONZERO}(y, x)"
    for form, (div, avg, function) in _FORMS.items():
        build = _operands_sql if form == OPERANDS_FORM else _quotient_sql
        exact = build(function, "x", _scale_of("px"), "y", _scale_of("py"))
        # (BIGINT, DECIMAL) and (DECIMAL, BIGINT) spelled out: DuckDB finds sum(int) /
        # sum(numeric) ambiguous between the integer and the decimal overloads otherwise
        out.append(
            f"CREATE OR REPLACE MACRO {div}(tx BIGINT, ty BIGINT, {params}) AS {divided}, "
            f"(tx DECIMAL, ty DECIMAL, {params}) AS {exact}, "
            f"(tx BIGINT, ty DECIMAL, {params}) AS {exact}, "
            f"(tx DECIMAL, ty BIGINT, {params}) AS {exact}, "
            # integer_division makes DuckDB's interval / number fail
            f"(tx INTERVAL, ty, {params}) AS x * (CAST(1 AS DOUBLE) / {NONZERO}(y, x)), "
            f"(tx, ty, {params}) AS {divided}"
        )
        exact = build(function, "total", _scale_of("px"), "n", "0")
        out.append(
            f"CREATE OR REPLACE MACRO {avg}(tx DECIMAL, px, total, n, average) AS {exact}, "
            "(tx, px, total, n, average) AS average"
        )
    return out


_MACRO_NAMES = (DIV, DIV_TEXT, DIV_OPERANDS, AVG, AVG_TEXT, AVG_OPERANDS, DIV_PROXY, AVG_PROXY,
                QUOTIENT, TO_NUMERIC, NONZERO)  # fmt: skip


def raised_by_macros(error: BaseException) -> bool:
    """True if a DuckDB binder error names one of the exact-numeric macros or functions (a
    type combination they do not resolve); the query can run without them."""
    text = str(error)
    return isinstance(error, duckdb.BinderException) and any(n + "(" in text for n in _MACRO_NAMES)


def _quotients(
    x: pa.Array,
    xs: pa.Array,
    kx: pa.Array,
    y: pa.Array,
    ys: pa.Array,
    ky: pa.Array,
    /,
    max_scale: int | None = None,
) -> numeric_batch.Quotients:
    if len(x) == 0:
        return numeric_batch.Quotients(pa.array([], pa.string()), pa.array([], pa.float64()))
    scale_x, scale_y = kx[0].as_py() or 0, ky[0].as_py() or 0
    x, xs, y, ys = (_array(a) for a in (x, xs, y, ys))
    return numeric_batch.quotients(x, xs, scale_x, y, ys, scale_y, max_scale)


def _quotient_udf(
    x: pa.Array, xs: pa.Array, kx: pa.Array, y: pa.Array, ys: pa.Array, ky: pa.Array
) -> pa.Array:
    texts = _quotients(x, xs, kx, y, ys, ky, max_scale=SCALE).texts
    try:
        return arrow_owned(pc.cast(texts, pa.decimal128(38, SCALE)))
    except pa.ArrowInvalid as e:
        raise ValueError(
            f"numeric field overflow: the exact result needs more than {38 - SCALE} digits "
            f"before the decimal point (cast an operand to double precision)"
        ) from e


def _quotient_text_udf(
    x: pa.Array, xs: pa.Array, kx: pa.Array, y: pa.Array, ys: pa.Array, ky: pa.Array
) -> pa.Array:
    texts, order = _quotients(x, xs, kx, y, ys, ky)
    return arrow_owned(
        pa.StructArray.from_arrays(
            [order, texts], names=[ORDER_FIELD, TEXT_FIELD], mask=pc.is_null(texts)
        )
    )


def operand_texts(operands: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Postgres's text of each quotient of an `OPERANDS_FORM` column (NULL where an
    operand is). Raises ValueError("division by zero") for a zero divisor."""
    array = _array(operands)
    if len(array) == 0:
        return pa.array([], pa.string())
    x, y = _operand(array.field(DIVIDEND)), _operand(array.field(DIVISOR))
    return numeric_batch.quotients(*x, *y).texts


def _operand(values: pa.Array) -> tuple[pa.Array, pa.Array, int]:
    """An integer or decimal operand as `numeric_batch.quotients` takes it: DECIMAL(38, 6)
    values where its scale is at most 6 and it fits (below 10^32), else text; its scale."""
    kind = values.type
    scale = kind.scale if pa.types.is_decimal(kind) else 0
    fast = pa.decimal128(38, numeric_batch.FAST_SCALE)
    if scale <= numeric_batch.FAST_SCALE and (
        pa.types.is_decimal(kind) or pa.types.is_integer(kind)
    ):
        try:
            return pc.cast(values, fast), pa.nulls(len(values), pa.string()), scale
        except pa.ArrowInvalid:
            pass  # 10^32 or more: as text
    texts = [None if v is None else _plain_text(v) for v in values.to_pylist()]
    return pa.nulls(len(values), fast), pa.array(texts, pa.string()), scale


def _plain_text(value: object) -> str:
    """A Decimal or int in plain notation with all its decimals ("1E-20" is 0.000...01)."""
    return format(value, "f") if isinstance(value, Decimal) else str(value)


def arrow_owned(values: pa.Array) -> pa.Array:
    """`values` copied into memory Arrow allocated.

    A UDF's result is released by whichever DuckDB thread finishes with it. A buffer numpy
    owns (pa.array over a numpy array is zero-copy) needs the GIL to be released, and a
    DuckDB worker waiting for the GIL deadlocks against a session thread that holds it
    while DuckDB ends the query and waits for its workers (seen in CI: a parameterized
    `SELECT $1 / qty ... LIMIT 5` hung the server for good). Buffers Arrow allocated are
    freed without Python. Concatenating always allocates new buffers, the struct's children
    included; for a 2048-row batch the copy is a few tens of kilobytes."""
    return pa.concat_arrays([values])


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values


def install(conn: duckdb.DuckDBPyConnection) -> None:
    """Register the exact quotient functions and the macros (visible to every cursor)."""
    fast = duckdb.sqltype(numeric_batch.FAST_TYPE)
    text, scale = duckdb.sqltype("VARCHAR"), duckdb.sqltype("INTEGER")
    params = [fast, text, scale, fast, text, scale]
    arrow = duckdb.func.ARROW
    result = duckdb.decimal_type(38, SCALE)
    conn.create_function(  # type: ignore[call-overload]
        QUOTIENT, _quotient_udf, params, result, type=arrow, null_handling="special"
    )
    as_text = duckdb.sqltype(TEXT_RESULT_TYPE)
    conn.create_function(  # type: ignore[call-overload]
        QUOTIENT_TEXT, _quotient_text_udf, params, as_text, type=arrow, null_handling="special"
    )
    for sql in macros_sql():
        conn.execute(sql)


# ---- the rewrite ----------------------------------------------------------------------------


def _name(call: ast.FuncCall) -> str:
    names = [n.sval or "" for n in call.funcname or () if isinstance(n, ast.String)]
    return (names[-1] if names else "").lower()


def is_avg(node: object) -> bool:
    """`avg(x)` (any DISTINCT, FILTER, OVER)."""
    return (
        isinstance(node, ast.FuncCall)
        and _name(node) == "avg"
        and len(node.args or ()) == 1
        and not node.agg_star
    )


def is_div(node: object) -> bool:
    return (
        isinstance(node, ast.A_Expr)
        and node.kind == enums.A_Expr_Kind.AEXPR_OP
        and node.lexpr is not None
        and [n.sval for n in node.name or () if isinstance(n, ast.String)][-1:] == ["/"]
    )


def _mentions_quotient(node: object) -> bool:
    if isinstance(node, tuple | list):
        return any(_mentions_quotient(item) for item in node)
    if not isinstance(node, ast.Node):
        return False
    if is_div(node) or is_avg(node):
        return True
    return any(_mentions_quotient(getattr(node, attr)) for attr in node)


def item_forms(stmt: ast.Node) -> dict[int, str]:
    """The avg()/division nodes that are a bare select-list item of the outer query, by id:
    those are sent as Postgres's text, computed in the query (`TEXT_FORM`) when ORDER BY
    may sort by them, else by the server (`OPERANDS_FORM`). Not under SELECT DISTINCT or
    when GROUP BY computes a quotient (the expressions must match the select list's)."""
    if not isinstance(stmt, ast.SelectStmt) or stmt.op != 0 or stmt.distinctClause:
        return {}
    if _mentions_quotient(stmt.groupClause):
        return {}
    found = {}
    for position, target in enumerate(stmt.targetList or (), start=1):
        value = target.val if isinstance(target, ast.ResTarget) else None
        if is_div(value) or is_avg(value):
            name = target.name if isinstance(target, ast.ResTarget) else None
            sorted_by = any(_may_sort_by(s, position, name) for s in stmt.sortClause or ())
            found[id(value)] = TEXT_FORM if sorted_by else OPERANDS_FORM
    return found


def _may_sort_by(sort: object, position: int, name: str | None) -> bool:
    """Whether an ORDER BY item may refer to the select-list item at `position` named
    `name`: its number, a bare name equal to the item's, or any expression with a quotient."""
    key = sort.node if isinstance(sort, ast.SortBy) else sort
    if isinstance(key, ast.A_Const):
        return isinstance(key.val, ast.Integer) and key.val.ival == position
    if isinstance(key, ast.ColumnRef):
        fields = [f.sval or "" for f in key.fields or () if isinstance(f, ast.String)]
        # an item without an alias has a name of its own too (`avg`, `?column?`)
        return len(fields) != 1 or name is None or fields[0].lower() == name.lower()
    return _mentions_quotient(key)


def _call(name: str, *args: ast.Node) -> ast.FuncCall:
    return ast.FuncCall(funcname=(ast.String(sval=name),), args=args, funcformat=0)


def _aggregate(call: ast.FuncCall, name: str) -> ast.FuncCall:
    return ast.FuncCall(
        funcname=(ast.String(sval=name),),
        args=call.args,
        agg_distinct=call.agg_distinct,
        agg_filter=call.agg_filter,
        over=call.over,
        funcformat=0,
    )


# aggregate and window functions whose result has their argument's type
_SAME_TYPE = {"min", "max", "first", "last", "any_value", "arbitrary", "lag", "lead",
              "first_value", "last_value", "nth_value"}  # fmt: skip
_BIGINT = {"count", "row_number", "rank", "dense_rank", "ntile"}


def type_proxy(node: Any) -> Any:
    """A copy of an (already rewritten) expression with the same kind of type (integer,
    exact, other) and no aggregate or window function, for a typed macro argument; None
    when it holds an aggregate whose type is not known here."""
    if isinstance(node, tuple | list):
        items = [type_proxy(item) for item in node]
        if any(item is None and orig is not None for item, orig in zip(items, node, strict=True)):
            return None
        return tuple(items) if isinstance(node, tuple) else items
    if not isinstance(node, ast.Node) or isinstance(node, ast.SubLink):
        return node
    if isinstance(node, ast.FuncCall):
        return _call_proxy(node)
    changes = {}
    for attr in node:
        value = getattr(node, attr)
        if isinstance(value, ast.Node | tuple | list):
            proxy = type_proxy(value)
            if proxy is None:
                return None
            changes[attr] = proxy
    if not changes:
        return node
    return type(node)(**{**{attr: getattr(node, attr) for attr in node}, **changes})


def _call_proxy(call: ast.FuncCall) -> Any:
    name, args = _name(call), call.args or ()
    if name == SUM_MACRO:  # sb_sum_result(x, sum(x))
        return _call(SUM_PROXY, args[0])
    if name in (AVG, AVG_TEXT, AVG_OPERANDS):  # sb_avg(proxy x, proxy x, sum, count, avg)
        return _call(AVG_PROXY, args[0])
    if name in (DIV, DIV_TEXT, DIV_OPERANDS):  # sb_div(proxy x, proxy y, proxy x, proxy y, x, y)
        return _call(DIV_PROXY, args[0], args[1])
    aggregate = call.over is not None or call.agg_star or call.agg_distinct or call.agg_filter
    if name in _BIGINT and (aggregate or name == "count"):
        return _cast(ast.A_Const(val=ast.Integer(ival=1)), "bigint")
    if name == "sum" and len(args) == 1:
        inner = type_proxy(args[0])
        return None if inner is None else _call(SUM_PROXY, inner)
    if name in _SAME_TYPE and args:
        return type_proxy(args[0])
    if aggregate or name in _AGGREGATE_FUNCTIONS:
        return None
    proxy_args = type_proxy(args)
    if proxy_args is None:
        return None
    return ast.FuncCall(funcname=call.funcname, args=proxy_args or None, funcformat=0)


_AGGREGATE_FUNCTIONS = {
    "avg", "stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop",
    "bit_and", "bit_or", "bool_and", "bool_or", "every", "string_agg", "array_agg",
    "json_agg", "jsonb_agg", "mode", "percentile_cont", "percentile_disc", "median",
    "percent_rank", "cume_dist", "corr", "covar_pop", "covar_samp", "regr_slope",
}  # fmt: skip


def _cast(node: ast.Node, type_name: str) -> ast.TypeCast:
    return ast.TypeCast(
        arg=node, typeName=ast.TypeName(names=(ast.String(sval=type_name),), typemod=-1)
    )


def scale_proxy(node: Any) -> Any:
    """A copy of an (already rewritten) expression with the same type, legal where the
    expression is, with each nested avg()/division replaced by its small stand-in: what
    the macros read the scale of with typeof()."""
    if isinstance(node, tuple | list):
        items = [scale_proxy(item) for item in node]
        return tuple(items) if isinstance(node, tuple) else items
    if not isinstance(node, ast.Node) or isinstance(node, ast.SubLink):
        return node
    if isinstance(node, ast.FuncCall):
        name, args = _name(node), node.args or ()
        if name in (AVG, AVG_TEXT, AVG_OPERANDS):
            return _call(AVG_PROXY, args[0])
        if name in (DIV, DIV_TEXT, DIV_OPERANDS):
            return _call(DIV_PROXY, args[0], args[1])
    changes = {
        attr: scale_proxy(getattr(node, attr))
        for attr in node
        if isinstance(getattr(node, attr), ast.Node | tuple | list)
    }
    if not changes:
        return node
    return type(node)(**{**{attr: getattr(node, attr) for attr in node}, **changes})


def avg_call(call: ast.FuncCall, form: str) -> ast.FuncCall | None:
    """`avg(x)` (arguments already rewritten) as the typed macro call; None if x's type
    cannot be told at bind time."""
    (arg,) = call.args or ()
    proxy = type_proxy(arg)
    if proxy is None:
        return None
    total, count = _aggregate(call, "sum"), _aggregate(call, "count")
    scale = _aggregate(call, "sum")
    scale.args = (scale_proxy(arg),)
    return _call(_FORMS[form][1], proxy, scale, total, count, call)


def div_call(x: ast.Node, y: ast.Node, form: str) -> ast.FuncCall | None:
    """`x / y` (operands already rewritten) as the typed macro call, which also checks for
    a zero divisor; None if the operands' types cannot be told at bind time."""
    px, py = type_proxy(x), type_proxy(y)
    if px is None or py is None:
        return None
    sx, sy = scale_proxy(x), scale_proxy(y)
    return _call(_FORMS[form][0], px, py, sx, sy, x, y)
