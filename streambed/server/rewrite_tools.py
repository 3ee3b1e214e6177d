"""Rewrites for the catalog SQL of BI and admin tools (used by `streambed.server.rewrite`).

- `format(template, ...)`: Postgres's %s, %I, %L, %% and positional %n$ specifiers, turned
  into a concatenation when the template is a constant;
- `set_config(name, value, is_local)` and `current_setting(name [, missing_ok])` over the
  session's Postgres settings (never DuckDB's);
- pg_settings / pg_show_all_settings() / pg_database as calls of table macros holding the
  session's values;
- scalar functions in FROM (`FROM string_to_array(...) s`), which DuckDB reads as table
  functions, as a one-row subquery.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pglast import ast

from streambed.server import catalog_tools
from streambed.server.timetravel import TimeTravelError

SCHEMA = catalog_tools.SCHEMA


class RewriteError(TimeTravelError):
    """A statement the rewriter refuses, with its SQLSTATE."""


# Functions Postgres lets a query call in FROM that return one value (one row, one column).
SCALAR_IN_FROM = frozenset(
    {
        "string_to_array", "regexp_split_to_array", "parse_ident", "current_setting",
        "current_schemas", "current_schema", "current_database", "current_user", "version",
        "array_append", "array_cat", "array_remove", "lower", "upper", "now", "to_char",
    }
)  # fmt: skip
SESSION_RELATIONS = frozenset({"pg_settings", "pg_database"})


def func(name: str, args: list[Any], schema: str | None = SCHEMA) -> ast.FuncCall:
    names = (ast.String(sval=schema), ast.String(sval=name)) if schema else (ast.String(sval=name),)
    return ast.FuncCall(funcname=names, args=tuple(args), funcformat=0)


def const(value: str | int | bool | None) -> ast.Node:
    if value is None:
        return ast.A_Const(isnull=True)
    if isinstance(value, bool):
        return ast.A_Const(val=ast.Boolean(boolval=value))
    if isinstance(value, int):
        return ast.A_Const(val=ast.Integer(ival=value))
    return ast.A_Const(val=ast.String(sval=value))


def text(value: str | None) -> ast.Node:
    """A text constant (DuckDB types a bare literal by its content)."""
    return ast.TypeCast(
        arg=const(value), typeName=ast.TypeName(names=(ast.String(sval="varchar"),))
    )


def _array(values: list[str | None]) -> ast.Node:
    varchar = ast.TypeName(names=(ast.String(sval="varchar"),), arrayBounds=(ast.Integer(ival=-1),))
    return ast.TypeCast(arg=ast.A_ArrayExpr(elements=tuple(const(v) for v in values)),
                        typeName=varchar)  # fmt: skip


def _concat(parts: list[Any]) -> Any:
    if not parts:
        return const("")
    result = parts[0]
    for part in parts[1:]:
        result = ast.A_Expr(kind=0, name=(ast.String(sval="||"),), lexpr=result, rexpr=part)
    return result


# ---- session relations --------------------------------------------------------------------


def settings_call(settings: Mapping[str, str]) -> ast.FuncCall:
    rows = catalog_tools.settings_rows(settings)
    return func(
        "sb_settings",
        [_array([r[i] for r in rows]) for i in range(5)],
    )


def session_relation(name: str, settings: Mapping[str, str], database: str) -> ast.FuncCall:
    if name == "pg_settings":
        return settings_call(settings)
    return func("sb_database", [const(database)])


def relation_call(node: ast.RangeVar, call: ast.FuncCall) -> ast.RangeFunction:
    alias = node.alias or ast.Alias(aliasname=node.relname)
    return ast.RangeFunction(functions=((call, None),), alias=alias)


def scalar_in_from(node: ast.RangeFunction) -> tuple[ast.FuncCall, str] | None:
    """The call and column name of `FROM f(...) [alias]` where f returns one value."""
    functions = node.functions or ()
    if len(functions) != 1 or node.ordinality or node.is_rowsfrom:
        return None
    item = functions[0]
    call = item[0] if isinstance(item, tuple) else item
    if not isinstance(call, ast.FuncCall):
        return None
    names = [n.sval for n in call.funcname or () if isinstance(n, ast.String)]
    if not names or names[-1] not in SCALAR_IN_FROM or names[:-1] not in ([], ["pg_catalog"]):
        return None
    alias = node.alias
    if alias is not None and alias.colnames:
        first = alias.colnames[0]
        return call, (first.sval if isinstance(first, ast.String) else None) or names[-1]
    return call, (alias.aliasname if alias is not None else None) or names[-1]


def as_subquery(node: ast.RangeFunction, call: Any, column: str) -> ast.RangeSubselect:
    select = ast.SelectStmt(
        targetList=(ast.ResTarget(name=column, val=call),),
        op=0,
    )
    alias = node.alias or ast.Alias(aliasname=column)
    return ast.RangeSubselect(subquery=select, alias=ast.Alias(aliasname=alias.aliasname))


# ---- settings -----------------------------------------------------------------------------


def current_setting(
    args: list[Any], settings: Mapping[str, str], value_of: Callable[[Any], Any]
) -> ast.Node:
    if len(args) not in (1, 2):
        raise RewriteError("function current_setting takes one or two arguments", "42883")
    missing_ok = False
    if len(args) == 2:
        missing_ok = _bool(value_of(args[1]), "missing_ok")
    known = dict(catalog_tools.known_settings(settings))
    name = _constant_or_none(args[0], value_of)
    if isinstance(name, str):
        value = known.get(name.lower())
        if value is None and not missing_ok:
            raise RewriteError(f'unrecognized configuration parameter "{name}"', "42704")
        return text(value)
    # a name computed by the query: a CASE over the settings
    missing: Any = const(None)
    if not missing_ok:
        missing = func("error", [_concat([const("unrecognized configuration parameter "),
                                          args[0]])], schema=None)  # fmt: skip
    return ast.CaseExpr(
        arg=func("lower", [args[0]], schema=None),
        args=tuple(ast.CaseWhen(expr=const(k), result=text(v)) for k, v in known.items()),
        defresult=missing,
    )


def set_config(
    args: list[Any],
    change: Callable[[str, str, bool], str] | None,
    value_of: Callable[[Any], Any],
) -> ast.Node:
    if len(args) != 3:
        raise RewriteError("function set_config takes three arguments", "42883")
    name, value, is_local = (value_of(a) for a in args)
    if name is None:
        raise RewriteError("SET requires parameter name", "22023")
    if change is None:
        raise RewriteError("set_config() is not available here", "0A000")
    local = _bool(is_local, "is_local")
    return text(change(str(name), "" if value is None else str(value), local))


def _bool(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("t", "true", "on", "yes", "y", "1"):
        return True
    if text in ("f", "false", "off", "no", "n", "0"):
        return False
    raise RewriteError(f'invalid input syntax for type boolean: "{value}" ({what})', "22P02")


def _constant_or_none(node: Any, value_of: Callable[[Any], Any]) -> Any:
    try:
        return value_of(node)
    except TimeTravelError:
        return _NOT_CONSTANT


_NOT_CONSTANT = object()


# ---- format() -----------------------------------------------------------------------------

_SPEC = re.compile(r"%(?:(\d+)\$)?([-]?)(\d*|\*)([sIL%])?")


def format_call(args: list[Any], value_of: Callable[[Any], Any]) -> Any:
    """Postgres's format(): %s (text, NULL as ''), %I (identifier), %L (literal), %%."""
    if not args:
        raise RewriteError("function format() requires at least one argument", "42883")
    template = _constant_or_none(args[0], value_of)
    if template is None:
        return const(None)
    if not isinstance(template, str):
        raise RewriteError("format() needs a constant format string here", "0A000")
    values = args[1:]
    parts: list[Any] = []
    position = 0
    pos = 0
    while True:
        start = template.find("%", pos)
        if start < 0:
            if template[pos:]:
                parts.append(const(template[pos:]))
            break
        if template[pos:start]:
            parts.append(const(template[pos:start]))
        match = _SPEC.match(template, start)
        if match is None or match.group(4) is None:
            end = match.end() if match is not None else start + 1
            if end >= len(template):
                raise RewriteError("unterminated format() type specifier", "22023")
            raise RewriteError(f'unrecognized format() type specifier "{template[end]}"', "22023")
        number, flag, width, kind = match.groups()
        pos = match.end()
        if kind == "%":
            parts.append(const("%"))
            continue
        if width == "*":
            raise RewriteError("format() widths taken from arguments are not supported", "0A000")
        index = int(number) - 1 if number else position
        if number and int(number) == 0:
            raise RewriteError("format specifies argument 0, but arguments are numbered from 1",
                               "22023")  # fmt: skip
        if index >= len(values):
            raise RewriteError("too few arguments for format()", "22023")
        position = index + 1
        value = values[index]
        if kind == "I" and _constant_or_none(value, value_of) is None:
            raise RewriteError("null values cannot be formatted as an SQL identifier", "22004")
        if kind == "s":
            part: Any = ast.CoalesceExpr(args=(func("sb_text", [value]), const("")))
        elif kind == "I":
            part = func("sb_format_ident", [value])
        else:
            part = func("sb_quote_literal", [value])
        if width:
            # padded with spaces to the width (left-justified with '-'), never cut
            part = func("sb_pad", [part, const(int(width)), const(bool(flag))])
        parts.append(part)
    return _concat(parts)


def is_bare_null(node: Any) -> bool:
    """A select-list item that is just NULL (`SELECT NULL AS x`)."""
    return (
        isinstance(node, ast.ResTarget)
        and isinstance(node.val, ast.A_Const)
        and bool(node.val.isnull)
    )
