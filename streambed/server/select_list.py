"""Select-list items Postgres evaluates otherwise than DuckDB.

- `generate_series(...)` is a set-returning function in Postgres (one row per value), a
  list in DuckDB: it is unnested (psqlODBC's SQLForeignKeys numbers key columns so);
- `pg_partition_ancestors(t)` in a select list is the table itself (nothing is
  partitioned here; psql's describe);
- a reg* value of the outer query (`conrelid::regclass`) is sent as its name, as Postgres
  outputs it (psql's "Referenced by"); inside the query it stays an OID.
"""

from __future__ import annotations

from pglast import ast, enums

from streambed.server import catalog

_REG_TYPES = ("regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole")


def is_series_target(node: ast.Node) -> bool:
    """`node` is a select-list item `generate_series(...)`: a set-returning function in
    Postgres (one row per value), a list in DuckDB (psqlODBC's SQLForeignKeys numbers key
    columns so)."""
    if not isinstance(node, ast.ResTarget) or not isinstance(node.val, ast.FuncCall):
        return False
    names = [n.sval for n in node.val.funcname or () if isinstance(n, ast.String)]
    return names[-1:] in (["generate_series"], ["pg_partition_ancestors"]) and names[:-1] in (
        [],
        ["pg_catalog"],
    )


def unnest_series(node: ast.ResTarget) -> ast.ResTarget:
    """The select-list item with its series as rows: `unnest` of generate_series's list;
    a table's partition ancestors (psql's describe) are the table itself, one row."""
    call = node.val
    assert isinstance(call, ast.FuncCall)
    names = [n.sval for n in call.funcname or () if isinstance(n, ast.String)]
    if names[-1] == "pg_partition_ancestors":
        schema, name = ast.String(sval=catalog.SCHEMA), ast.String(sval="regclass_oid")
        node.val = ast.FuncCall(funcname=(schema, name), args=call.args)
        return node
    node.val = ast.FuncCall(funcname=(ast.String(sval="unnest"),), args=(call,))
    return node


def name_reg_outputs(stmt: ast.Node) -> None:
    """Make each reg* cast that is an output column of `stmt` (its outer select lists) a
    cast to text of it, which the rewrite turns into the object's name."""
    arms: list[ast.Node | None] = [stmt]
    while arms:
        select = arms.pop()
        if not isinstance(select, ast.SelectStmt):
            continue
        if select.op != enums.SetOperation.SETOP_NONE:
            arms += [select.larg, select.rarg]
            continue
        for target in select.targetList or ():
            value = target.val if isinstance(target, ast.ResTarget) else None
            if isinstance(value, ast.TypeCast) and value.typeName is not None:
                names = [n.sval for n in value.typeName.names or () if isinstance(n, ast.String)]
                if names[-1:] and names[-1] in _REG_TYPES and not value.typeName.arrayBounds:
                    text = ast.TypeName(names=(ast.String(sval="text"),))
                    target.val = ast.TypeCast(arg=value, typeName=text)
