"""Rewriting Postgres SQL for DuckDB, from a real Postgres parse tree (pglast), only when needed.

A query is rewritten only when it touches something DuckDB does not have or answers
differently: pg_catalog / information_schema relations and functions (served by
`streambed.server.catalog`), Postgres-only syntax such as ``OPERATOR(pg_catalog.~)`` and
``COLLATE pg_catalog.default``, reg* casts, and session functions (``version()``,
``current_schema()``, ``current_user``) whose answers come from the session. Everything
else goes to DuckDB as the client wrote it.

`pg_column_names` computes the column names Postgres would give a SELECT's targets
(``count(*)`` is ``count``, ``1::int`` is ``int4``, an expression is ``?column?``), so results
are labelled like Postgres without touching the SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pglast import ast, enums

from streambed.server import (
    catalog,
    extract,
    keywords,
    numeric,
    rewrite_tools,
    select_list,
    vectors,
)
from streambed.server.keywords import QuotingStream
from streambed.server.numeric import SUM_MACRO
from streambed.server.timetravel import FUNCTIONS as TT_FUNCTIONS
from streambed.server.timetravel import TimeTravelError, split_table_name

_USER_FUNCS = {
    enums.SQLValueFunctionOp.SVFOP_CURRENT_USER,
    enums.SQLValueFunctionOp.SVFOP_SESSION_USER,
    enums.SQLValueFunctionOp.SVFOP_USER,
    enums.SQLValueFunctionOp.SVFOP_CURRENT_ROLE,
}
_REGEX_OPS = {"~": (False, False), "!~": (True, False), "~*": (False, True), "!~*": (True, True)}
_REG_TYPES = {
    "regclass",
    "regtype",
    "regnamespace",
    "regproc",
    "regprocedure",
    "regrole",
    "regoper",
}
# Postgres type names DuckDB does not know, and what to use instead.
_TYPE_MAP = {
    "name": "varchar",
    "oid": "bigint",
    "xid": "bigint",
    "cid": "bigint",
    "char": "varchar",
    "bpchar": "varchar",
    "int2vector": "smallint[]",
    "oidvector": "bigint[]",
    "text": "varchar",
    "regclass": "bigint",
    "regtype": "bigint",
    "regnamespace": "bigint",
    "regproc": "bigint",
    "regrole": "bigint",
    "anyarray": "varchar",
    "pg_node_tree": "varchar",
    "aclitem": "varchar",
}


@dataclass(frozen=True)
class SessionValues:
    """Answers that depend on the session, substituted as constants."""

    user: str
    database: str
    schema: str
    search_path: tuple[str, ...]
    version: str
    # (function, "schema.table", value) -> (metadata location, snapshot id)
    time_travel: Callable[[str, str, Any], tuple[str, int]] | None = None
    params: tuple[Any, ...] = ()
    settings: Mapping[str, str] = field(default_factory=dict)  # SHOW-able, lowercase names
    # set_config(name, value, is_local) -> the value set (validated like SET)
    set_setting: Callable[[str, str, bool], str] | None = None


def _strings(names: Any) -> list[str]:
    return [n.sval or "" for n in names or () if isinstance(n, ast.String)]


def _is_catalog_range(node: ast.RangeVar) -> bool:
    schema = node.schemaname
    if schema == "pg_catalog":
        return True
    if schema == "information_schema":
        return node.relname in catalog.INFORMATION_SCHEMA_RELATIONS
    return schema is None and node.relname in catalog.CATALOG_RELATIONS


def _walk(node: Any, visit: Callable[[Any], None]) -> None:
    if isinstance(node, tuple | list):
        for item in node:
            _walk(item, visit)
        return
    if not isinstance(node, ast.Node):
        return
    visit(node)
    for attr in node:
        _walk(getattr(node, attr), visit)


def needs_rewrite(stmt: ast.Node) -> bool:
    """True when DuckDB would fail on `stmt` or answer it differently from Postgres."""
    found = False

    def visit(node: Any) -> None:
        nonlocal found
        if found:
            return
        if keywords.names_keyword(node) or rewrite_tools.is_bare_null(node):
            found = True  # printed quoted; typed text
        elif isinstance(node, ast.RangeVar):
            found = _is_catalog_range(node)
        elif isinstance(node, ast.FuncCall):
            names = _strings(node.funcname)
            found = (
                (len(names) > 1 and names[0] in ("pg_catalog", "information_schema"))
                or names[-1] in catalog.COMPAT_FUNCTIONS
                or names[-1] in catalog.SESSION_FUNCTIONS
                or names[-1] == "_pg_expandarray"
                or (names[-1] in TOOL_FUNCTIONS and names[:-1] in ([], ["pg_catalog"]))
                or _is_sum(node)
                or numeric.is_avg(node)
                or names[-1] in ("extract", "date_part")
            )
        elif isinstance(node, ast.A_Expr):
            names = _strings(node.name)
            found = len(names) > 1 or (bool(names) and names[-1] in _REGEX_OPS)
            found = found or _is_division(node)
            found = found or _like_escape(node) is not None
        elif isinstance(node, ast.CollateClause):
            found = True
        elif isinstance(node, ast.A_Indirection):
            found = vectors.is_vector_subscript(node)
        elif isinstance(node, ast.ResTarget):
            found = select_list.is_series_target(node)
        elif isinstance(node, ast.SQLValueFunction):
            found = node.op in _USER_FUNCS or node.op in (
                enums.SQLValueFunctionOp.SVFOP_CURRENT_CATALOG,
                enums.SQLValueFunctionOp.SVFOP_CURRENT_SCHEMA,
            )
        elif isinstance(node, ast.TypeName):
            names = _strings(node.names)
            found = names[-1] in _REG_TYPES or names[-1] in ("name", "oid", "char", "bytea")
            found = found or (names[-1] in ("numeric", "decimal") and not node.typmods)
        elif isinstance(node, ast.RangeFunction):
            found = _time_travel_call(node) is not None
            found = found or rewrite_tools.scalar_in_from(node) is not None
        elif isinstance(node, ast.ColumnRef):
            fields = node.fields or ()
            found = (
                len(fields) > 2
                and isinstance(fields[0], ast.String)
                and (fields[0].sval in ("pg_catalog", "information_schema"))
            )

    _walk(stmt, visit)
    return found


TOOL_FUNCTIONS = frozenset({"format", "set_config", "pg_show_all_settings"})


def _is_sum(node: ast.FuncCall) -> bool:
    """`sum(x)`: Postgres's sum of int2/int4 is bigint, DuckDB's is HUGEINT (numeric)."""
    names = _strings(node.funcname)
    return (
        names[-1:] == ["sum"]
        and names[:-1] in ([], ["pg_catalog"])
        and len(node.args or ()) == 1
        and not node.agg_star
    )


def _is_division(node: ast.A_Expr) -> bool:
    """`a / b` or `a % b`: Postgres raises division_by_zero where DuckDB answers NULL/inf."""
    names = _strings(node.name)
    return (
        node.kind == enums.A_Expr_Kind.AEXPR_OP
        and node.lexpr is not None
        and bool(names)
        and names[-1] in ("/", "%")
    )


def bytea_literal(text: str) -> bytes | None:
    """The bytes of a Postgres bytea input string (hex `\\x0a0b` or escape format), or None
    if it is not valid bytea input."""
    if text.startswith("\\x"):
        try:
            return bytes.fromhex(text[2:])
        except ValueError:
            return None
    out = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\":
            out += char.encode()
            i += 1
        elif text[i + 1 : i + 2] == "\\":
            out.append(0x5C)
            i += 2
        elif len(text) >= i + 4 and all(c in "01234567" for c in text[i + 1 : i + 4]):
            value = int(text[i + 1 : i + 4], 8)
            if value > 255:
                return None
            out.append(value)
            i += 4
        else:
            return None
    return bytes(out)


def _time_travel_call(node: ast.RangeFunction) -> ast.FuncCall | None:
    for item in node.functions or ():
        for part in item if isinstance(item, tuple) else (item,):
            if isinstance(part, ast.FuncCall):
                names = _strings(part.funcname)
                if len(names) == 2 and names[0] == "streambed" and names[1] in TT_FUNCTIONS:
                    return part
    return None


def _constant_value(node: Any, params: tuple[Any, ...]) -> Any:
    if isinstance(node, ast.TypeCast):
        return _constant_value(node.arg, params)
    if isinstance(node, ast.ParamRef):
        index = (node.number or 0) - 1
        if not 0 <= index < len(params):
            raise TimeTravelError(f"parameter ${node.number} has no value", "08P01")
        return params[index]
    if isinstance(node, ast.A_Const):
        if node.isnull:
            return None
        value = node.val
        for attr in ("sval", "ival", "fval"):
            if hasattr(value, attr):
                return getattr(value, attr)
    raise TimeTravelError(
        "streambed time-travel functions take constant arguments or $n parameters", "0A000"
    )


_LIKE_FUNCS = {"~~": "like_escape", "!~~": "not_like_escape", "~~*": "ilike_escape",
               "!~~*": "not_ilike_escape"}  # fmt: skip


def _like_escape(node: ast.A_Expr) -> ast.FuncCall | None:
    """`x LIKE p ESCAPE e` parses as like_escape(p, e); DuckDB wants like_escape(x, p, e)."""
    rexpr = node.rexpr
    if not isinstance(rexpr, ast.FuncCall) or _strings(rexpr.funcname)[-1:] != ["like_escape"]:
        return None
    name = _LIKE_FUNCS.get((_strings(node.name) or [""])[-1])
    if name is None:
        return None
    return _func(name, [node.lexpr, *(rexpr.args or ())], schema=None)


def _const(value: str | int | None) -> ast.Node:
    if value is None:
        return ast.A_Const(isnull=True)
    if isinstance(value, int):
        return ast.A_Const(val=ast.Integer(ival=value))
    return ast.A_Const(val=ast.String(sval=value))


def _func(name: str, args: list[Any], schema: str | None = catalog.SCHEMA) -> ast.FuncCall:
    names = (ast.String(sval=schema), ast.String(sval=name)) if schema else (ast.String(sval=name),)
    return ast.FuncCall(funcname=names, args=tuple(args), funcformat=0)


# Postgres functions behind SQL syntax (TRIM(BOTH x FROM y) is pg_catalog.btrim(y, x)) that
# DuckDB names differently.
_RENAMED_FUNCTIONS = {"btrim": "trim"}


def _sql_syntax(node: ast.FuncCall) -> bool:
    return node.funcformat == enums.CoercionForm.COERCE_SQL_SYNTAX


class _Rewriter:
    def __init__(self, session: SessionValues, item_forms: dict[int, str]) -> None:
        self.session = session
        self.wrapped_sums: set[int] = set()  # a node's children may be visited twice
        self.item_forms = item_forms  # avg/division nodes sent as numeric text, by id
        self.exact_numeric = True  # avg(), division, ::numeric as Postgres types them
        self.shifted: set[int] = set()  # vector subscripts already counted from 1
        self.set_arms: set[int] = set()  # SELECTs that are arms of a UNION/INTERSECT/EXCEPT

    def transform(self, node: Any) -> Any:
        if isinstance(node, tuple):
            return tuple(self.transform(item) for item in node)
        if isinstance(node, list):
            return [self.transform(item) for item in node]
        if not isinstance(node, ast.Node):
            return node
        replaced = self.replace(node)
        if replaced is not node or isinstance(node, ast.FuncCall):
            return replaced  # replace_func rewrote the call's arguments, filter and window
        for attr in node:
            value = getattr(node, attr)
            if isinstance(value, ast.Node | tuple | list):
                setattr(node, attr, self.transform(value))
        return node

    def replace(self, node: ast.Node) -> Any:
        if select_list.is_series_target(node):
            assert isinstance(node, ast.ResTarget)
            return select_list.unnest_series(node)
        if vectors.is_vector_subscript(node) and id(node) not in self.shifted:
            self.shifted.add(id(node))
            assert isinstance(node, ast.A_Indirection)
            return vectors.shift_subscripts(node)
        if isinstance(node, ast.SelectStmt):
            self.type_bare_nulls(node)
        if isinstance(node, ast.RangeVar) and _is_catalog_range(node):
            if node.relname in rewrite_tools.SESSION_RELATIONS:
                # pg_settings, pg_database: the session's values
                relation = rewrite_tools.session_relation(
                    node.relname, self.session.settings, self.session.database
                )
                return rewrite_tools.relation_call(node, relation)
            target = catalog.SCHEMA
            if node.schemaname == "information_schema":
                target = catalog.INFO_SCHEMA
            node.schemaname = target
            node.catalogname = None
            return node
        if isinstance(node, ast.ColumnRef):
            fields = list(node.fields or ())
            if (
                len(fields) > 2
                and isinstance(fields[0], ast.String)
                and fields[0].sval in ("pg_catalog", "information_schema")
            ):
                schema = catalog.SCHEMA if fields[0].sval == "pg_catalog" else catalog.INFO_SCHEMA
                fields[0] = ast.String(sval=schema)
                node.fields = tuple(fields)
            return node
        if isinstance(node, ast.CollateClause):
            return self.transform(node.arg)
        if (
            isinstance(node, ast.ResTarget)
            and node.name is None
            and isinstance(node.val, ast.FuncCall | ast.SQLValueFunction)
        ):
            # a call replaced by a constant keeps its Postgres name (in subqueries too)
            node.name = _figure_colname(node.val)
            return node
        if isinstance(node, ast.RangeFunction):
            call = _time_travel_call(node)
            if call is not None:
                return self.replace_time_travel(node, call)
            scalar = rewrite_tools.scalar_in_from(node)
            if scalar is not None:
                # a function of one value in FROM: DuckDB reads FROM f() as a table function
                scalar_call, column = scalar
                return rewrite_tools.as_subquery(node, self.transform(scalar_call), column)
            settings = self.settings_function(node)
            if settings is not None:
                return settings
            alias = node.alias
            if alias is not None and not alias.colnames and len(node.functions or ()) == 1:
                # Postgres: a scalar function in FROM aliased `s` is also its column `s`
                alias.colnames = (ast.String(sval=alias.aliasname),)
            node.functions = self.transform(node.functions)
            return node
        if isinstance(node, ast.SQLValueFunction):
            op = node.op
            if op in _USER_FUNCS:
                return _const(self.session.user)
            if op == enums.SQLValueFunctionOp.SVFOP_CURRENT_CATALOG:
                return _const(self.session.database)
            if op == enums.SQLValueFunctionOp.SVFOP_CURRENT_SCHEMA:
                return _const(self.session.schema)
            return node
        if isinstance(node, ast.FuncCall):
            return self.replace_func(node)
        if isinstance(node, ast.A_Expr):
            names = _strings(node.name)
            like = _like_escape(node)
            if like is not None:
                return self.transform(like)
            if names and names[-1] in _REGEX_OPS:
                negate, icase = _REGEX_OPS[names[-1]]
                args = [self.transform(node.lexpr), self.transform(node.rexpr)]
                if icase:
                    args.append(_const("i"))
                match: ast.Node = _func("regexp_matches", args, schema=None)
                if negate:
                    match = ast.BoolExpr(boolop=enums.BoolExprType.NOT_EXPR, args=(match,))
                return match
            if len(names) > 1:
                node.name = (ast.String(sval=names[-1]),)
            if _is_division(node):
                # Postgres raises 22012 for a zero divisor (integer, numeric and float alike)
                # unless the dividend is NULL; a new node: its operands are rewritten here
                lexpr, divisor = self.transform(node.lexpr), self.transform(node.rexpr)
                if numeric.is_div(node) and self.exact_numeric:
                    # Postgres's numeric division where the operands are exact (`numeric`)
                    form = self.item_forms.get(id(node), numeric.DECIMAL_FORM)
                    call = numeric.div_call(lexpr, divisor, form)
                    if call is not None:
                        return call
                rexpr = _func("sb_divisor", [divisor, lexpr])
                return ast.A_Expr(
                    kind=node.kind, name=node.name, lexpr=lexpr, rexpr=rexpr, location=node.location
                )
            return node
        if isinstance(node, ast.TypeCast):
            return self.replace_cast(node)
        return node

    def type_bare_nulls(self, node: ast.SelectStmt) -> None:
        """`SELECT NULL AS x` is text in Postgres (DuckDB: integer), except in a set
        operation's arms, whose types the other arms decide."""
        if node.op != enums.SetOperation.SETOP_NONE:
            self.set_arms.update({id(node.larg), id(node.rarg)})
            return
        if id(node) in self.set_arms:
            return
        for target in node.targetList or ():
            if rewrite_tools.is_bare_null(target):
                target.val = rewrite_tools.text(None)
                target.name = target.name or "?column?"

    def settings_function(self, node: ast.RangeFunction) -> ast.RangeFunction | None:
        """`FROM pg_show_all_settings()`: the rows of pg_settings."""
        functions = node.functions or ()
        item = functions[0] if len(functions) == 1 else None
        call = item[0] if isinstance(item, tuple) else item
        if not isinstance(call, ast.FuncCall) or call.args:
            return None
        if _strings(call.funcname)[-1:] != ["pg_show_all_settings"]:
            return None
        node.functions = ((rewrite_tools.settings_call(self.session.settings), None),)
        if node.alias is None:
            node.alias = ast.Alias(aliasname="pg_show_all_settings")
        return node

    def value_of(self, node: Any) -> Any:
        """The value of a constant or $n argument (raises TimeTravelError if not one)."""
        inner = node.arg if isinstance(node, ast.TypeCast) else node
        if isinstance(inner, ast.A_Const) and isinstance(inner.val, ast.Boolean):
            return inner.val.boolval
        return _constant_value(node, self.session.params)

    def replace_time_travel(self, node: ast.RangeFunction, call: ast.FuncCall) -> Any:
        function = _strings(call.funcname)[1]
        args = list(call.args or ())
        if len(args) != 2:
            raise TimeTravelError(
                f"streambed.{function} takes two arguments: ('schema.table', value)", "42883"
            )
        table = _constant_value(args[0], self.session.params)
        value = _constant_value(args[1], self.session.params)
        if self.session.time_travel is None or not isinstance(table, str):
            raise TimeTravelError(f"streambed.{function}: the first argument must be a table name")
        location, snapshot_id = self.session.time_travel(function, table, value)
        scan = ast.FuncCall(
            funcname=(ast.String(sval="iceberg_scan"),),
            args=(
                _const(location),
                ast.NamedArgExpr(name="snapshot_from_id", arg=_const(snapshot_id), argnumber=-1),
            ),
            funcformat=0,
        )
        node.functions = ((scan, None),)
        if node.alias is None:
            node.alias = ast.Alias(aliasname=split_table_name(table)[1])
        return node

    def replace_func(self, node: ast.FuncCall) -> Any:
        names = _strings(node.funcname)
        name = names[-1]
        args = list(self.transform(node.args or ()))
        if names[:-1] in ([], ["pg_catalog"]):
            constant = self.session_function(name, args)
            if constant is not None:
                return constant
        if name == "format" and names[:-1] in ([], ["pg_catalog"]) and not node.over:
            return rewrite_tools.format_call(args, self.value_of)
        if name == "_pg_expandarray" and len(args) == 1:
            # information_schema._pg_expandarray(arr): a set of (x, n), as pgjdbc's
            # getPrimaryKeys uses it in the select list
            return _func("unnest", [_func("sb_expandarray", args)], schema=None)
        if name in ("json_build_object", "jsonb_build_object"):
            pairs = [
                ast.TypeCast(arg=a, typeName=ast.TypeName(names=(ast.String(sval="varchar"),)))
                if i % 2 == 0
                else a
                for i, a in enumerate(args)
            ]
            return _func("json_object", pairs, schema=None)
        if len(args) == 2 and not node.over and names[:-1] in ([], ["pg_catalog"]):
            # Postgres 14+: extract() is numeric, date_part() double precision
            typed = None
            if name == "extract" and _sql_syntax(node):
                typed = extract.extract(args[0], args[1])
            elif name == "date_part":
                typed = extract.date_part(args[0], args[1])
            if typed is not None:
                return typed
        if name in catalog.COMPAT_FUNCTIONS:
            node.funcname = (ast.String(sval=catalog.SCHEMA), ast.String(sval=name))
        elif _sql_syntax(node) and name in ("extract", "position"):
            pass  # printed back as EXTRACT(f FROM x) / POSITION(a IN b), which DuckDB reads
        elif len(names) > 1 and names[0] in ("pg_catalog", "information_schema"):
            node.funcname = (ast.String(sval=_RENAMED_FUNCTIONS.get(name, name)),)
        node.args = tuple(args) if node.args is not None else None
        for attr in ("agg_order", "agg_filter", "over"):
            value = getattr(node, attr)
            if value is not None:
                setattr(node, attr, self.transform(value))
        if numeric.is_avg(node) and self.exact_numeric:
            form = self.item_forms.get(id(node), numeric.DECIMAL_FORM)
            call = numeric.avg_call(node, form)
            return node if call is None else call
        if _is_sum(node) and id(node) not in self.wrapped_sums:
            self.wrapped_sums.add(id(node))
            # the macro picks its result by the argument's type (int2/int4: bigint, which
            # raises on overflow as Postgres does) and drops that first argument; for a sum
            # of aggregates (`sum(max(x)) OVER ()`) a stand-in of the same type
            proxy = numeric.type_proxy(args[0])
            return node if proxy is None else _func(SUM_MACRO, [proxy, node], schema=None)
        return node

    def session_function(self, name: str, args: list[Any]) -> ast.Node | None:
        session = self.session
        if name == "version" and not args:
            return _const(session.version)
        if name in ("current_database", "current_catalog") and not args:
            return _const(session.database)
        if name == "current_schema" and not args:
            return _const(session.schema)
        if name in ("current_user", "session_user", "user") and not args:
            return _const(session.user)
        if name == "current_schemas":
            # current_schemas(true) includes the implicit pg_catalog, searched first
            implicit = not (
                args
                and isinstance(args[0], ast.A_Const)
                and isinstance(args[0].val, ast.Boolean)
                and not args[0].val.boolval
            )
            path = [s for s in session.search_path if s != "pg_catalog"]
            items = tuple(_const(s) for s in (["pg_catalog"] if implicit else []) + path)
            return ast.A_ArrayExpr(elements=items)
        if name == "pg_backend_pid" and not args:
            return _const(0)
        if name == "current_setting":
            # the session's Postgres settings, never DuckDB's
            return rewrite_tools.current_setting(args, session.settings, self.value_of)
        if name == "set_config":
            return rewrite_tools.set_config(args, session.set_setting, self.value_of)
        return None

    def replace_cast(self, node: ast.TypeCast) -> Any:
        type_name = node.typeName
        assert type_name is not None
        names = _strings(type_name.names)
        target = names[-1] if names else ""
        inner = node.arg
        if target in ("text", "varchar") and isinstance(inner, ast.TypeCast):
            inner_names = _strings(inner.typeName.names if inner.typeName else ())
            if inner_names and inner_names[-1] in _REG_TYPES:
                return _func(f"{inner_names[-1]}_name", [self.transform(inner.arg)])
        if target in _REG_TYPES:
            return _func(f"{target}_oid", [self.transform(inner)])
        if (
            target == "bytea"
            and isinstance(inner, ast.A_Const)
            and isinstance(inner.val, ast.String)
        ):
            # '\\x0001'::bytea: DuckDB's BLOB literal reads '\\x00' as one escaped byte
            # followed by text; give it the bytes Postgres reads
            value = bytea_literal(inner.val.sval or "")
            if value is not None:
                return _func("from_hex", [_const(value.hex())], schema=None)
        node.arg = self.transform(inner)
        if (
            target in ("numeric", "decimal")
            and not type_name.typmods
            and not type_name.arrayBounds
            and self.exact_numeric
        ):
            # Postgres's unconstrained numeric keeps the value's digits; DuckDB's NUMERIC is
            # DECIMAL(18,3): the macro keeps decimals as they are and widens integers
            proxy = numeric.type_proxy(node.arg)
            if proxy is not None:
                return _func(numeric.TO_NUMERIC, [proxy, node.arg], schema=None)
        mapped = _TYPE_MAP.get(target)
        if mapped is not None:
            is_array = mapped.endswith("[]") or bool(type_name.arrayBounds)
            base = mapped.removesuffix("[]")
            type_name = ast.TypeName(
                names=(ast.String(sval=base),),
                typemod=-1,
                arrayBounds=(ast.Integer(ival=-1),) if is_array else None,
            )
        elif len(names) > 1 and names[0] == "pg_catalog":
            type_name = ast.TypeName(
                names=(ast.String(sval=target),),
                typmods=type_name.typmods,
                typemod=type_name.typemod,
                arrayBounds=type_name.arrayBounds,
            )
        node.typeName = type_name
        return node


def rewrite(
    stmt: ast.Node, session: SessionValues, exact_numeric: bool = True
) -> tuple[str, list[int]]:
    """Rewrite one parsed statement for DuckDB; returns its SQL text and the numbers of the
    client's parameters it still uses, in the order of its own `$1`, `$2`, ... (a parameter
    the rewrite resolved into a constant, such as a time-travel bound or a setting's name,
    is gone, and DuckDB refuses parameters a query does not use). `exact_numeric` False:
    avg(), division and ::numeric as DuckDB computes them (`numeric`)."""
    rewriter = _Rewriter(session, numeric.item_forms(stmt) if exact_numeric else {})
    rewriter.exact_numeric = exact_numeric
    rewritten = rewriter.transform(stmt)
    kept = _compact_params(rewritten)
    text: str = QuotingStream()(rewritten)  # quotes names DuckDB reads as keywords
    return text, kept


def _compact_params(node: Any) -> list[int]:
    """Renumber the `$n` left in `node` as 1, 2, ... in the order of their old numbers;
    returns the old numbers."""
    refs: list[ast.ParamRef] = []
    _walk(node, lambda n: refs.append(n) if isinstance(n, ast.ParamRef) else None)
    kept = sorted({int(r.number or 0) for r in refs})
    if kept != list(range(1, len(kept) + 1)):
        new = {old: i for i, old in enumerate(kept, start=1)}
        for ref in refs:
            ref.number = new[int(ref.number or 0)]
    return kept


# ---- column names ----------------------------------------------------------------------

_TYPE_COLNAMES = {"int4": "int4", "int8": "int8", "int2": "int2", "bool": "bool"}


def _strong_name(node: Any) -> bool:
    """Whether Postgres's FigureColname names `node` with strength 2 (not a type name,
    `case` or `?column?`)."""
    if isinstance(node, ast.TypeCast):
        return _strong_name(node.arg)
    if isinstance(node, ast.CaseExpr):
        return node.defresult is not None and _strong_name(node.defresult)
    if isinstance(node, ast.A_Indirection):
        return _figure_colname(node) is not None
    return _figure_colname(node) is not None


def _figure_colname(node: Any) -> str | None:
    """Postgres's FigureColname: the name of an unaliased target, or None for '?column?'."""
    if isinstance(node, ast.ColumnRef):
        last = (node.fields or ())[-1]
        return last.sval if isinstance(last, ast.String) else None
    if isinstance(node, ast.A_Indirection):
        for item in reversed(node.indirection or ()):
            if isinstance(item, ast.String):
                return item.sval
        return _figure_colname(node.arg)
    if isinstance(node, ast.FuncCall):
        return _strings(node.funcname)[-1]
    if isinstance(node, ast.TypeCast):
        inner = _figure_colname(node.arg)
        if inner is not None and _strong_name(node.arg):
            return inner
        names = _strings(node.typeName.names if node.typeName else ())
        return names[-1] if names else None
    if isinstance(node, ast.CaseExpr):
        # the ELSE result's name when that is a column's or a function's, as Postgres does
        if node.defresult is not None and _strong_name(node.defresult):
            return _figure_colname(node.defresult)
        return "case"
    if isinstance(node, ast.A_ArrayExpr):
        return "array"
    if isinstance(node, ast.CoalesceExpr):
        return "coalesce"
    if isinstance(node, ast.MinMaxExpr):
        return "greatest" if node.op == enums.MinMaxOp.IS_GREATEST else "least"
    if isinstance(node, ast.RowExpr):
        return "row"
    if isinstance(node, ast.GroupingFunc):
        return "grouping"
    if isinstance(node, ast.SQLValueFunction):
        return str(node.op.name if node.op else "").removeprefix("SVFOP_").lower().rstrip("_n")
    if isinstance(node, ast.SubLink):
        kind = node.subLinkType
        if kind == enums.SubLinkType.EXISTS_SUBLINK:
            return "exists"
        if kind == enums.SubLinkType.ARRAY_SUBLINK:
            return "array"
        if kind == enums.SubLinkType.EXPR_SUBLINK:
            if node.subselect is None:
                return None
            sub_names = pg_column_names(node.subselect)
            return sub_names[0] if sub_names else None
    return None


_STAR = object()


def pg_column_names(stmt: ast.Node) -> list[str | None]:
    """Postgres names for a SELECT's output columns, `None` where DuckDB's name stands.

    A `*` target expands to an unknown number of columns; names before it count from the
    front and names after it are returned as None (left to DuckDB, which names them alike).
    """
    select: ast.Node | None = stmt
    while isinstance(select, ast.SelectStmt) and select.op != enums.SetOperation.SETOP_NONE:
        select = select.larg
    if not isinstance(select, ast.SelectStmt) or not select.targetList:
        return []
    names: list[str | None] = []
    for target in select.targetList:
        if not isinstance(target, ast.ResTarget):
            names.append(None)
            continue
        if target.name is not None:
            names.append(target.name)
            continue
        value = target.val
        if isinstance(value, ast.ColumnRef) and isinstance((value.fields or ())[-1], ast.A_Star):
            break
        names.append(_figure_colname(value) or "?column?")
    return names


def rename_map(names: list[str | None], actual: list[str]) -> Mapping[int, str]:
    """Positions whose DuckDB name differs from the Postgres name."""
    return {
        i: name
        for i, name in enumerate(names[: len(actual)])
        if name is not None and name != actual[i]
    }
