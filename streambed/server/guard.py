"""The allow-list: what a client's statement may contain, checked on its Postgres parse tree
before DuckDB sees it (and before the rewrite, which adds DuckDB calls of its own).

- Statements: SELECT (with VALUES, TABLE, WITH), EXPLAIN of one, DECLARE ... CURSOR FOR one;
  the session statements (BEGIN/COMMIT/..., SET/SHOW/RESET, FETCH/MOVE/CLOSE, DISCARD,
  DEALLOCATE, LISTEN/UNLISTEN) are answered by the session itself. Anything else that
  Postgres parses is a write or an administrative command: refused with 25006.
- Relations: the replicated tables (as Postgres resolves them: the named schema, or the
  session's search_path), the pg_catalog / information_schema relations streambed serves
  (and a few of DuckDB's information_schema views, `DUCKDB_INFORMATION_SCHEMA`), the
  relations of streambed's own catalog schemas, and the query's own CTEs. Anything else
  is `relation ... does not exist` (42P01), as DuckDB's own system views are not there for a
  client; a name that looks like a file path is refused with 42501.
- Table functions (in FROM; nothing else may stand there): `TABLE_FUNCTIONS`, streambed's
  time-travel functions `streambed.at_*`, the table macros streambed creates, and the file
  readers in `WAREHOUSE_READERS` on a constant path inside the warehouse.
- Scalar, aggregate and window functions: `allowed_functions.SCALAR_FUNCTIONS`, the macros
  streambed creates (found in DuckDB at startup, so every catalog macro is allowed as soon
  as it exists: those in `main` by name, the others qualified with their schema), and the
  Postgres functions the rewrite always replaces (`REWRITTEN`: the catalog's functions by
  their Postgres names, and the session's).

Refusals: a name in `DENIED` (known to read files, settings, logs or secrets, to run SQL
text or to change server state) gives 42501 with the reason; any other name not on the list
gives 42883, as Postgres answers for a function it does not have. A schema-qualified call
must match too: `pg_catalog.now()` is `now()`, `main.query(...)` is `query(...)`, and any
other schema must be one of streambed's with a macro of that name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pglast import ast

from streambed.server import catalog, rewrite, rewrite_tools, timetravel
from streambed.server.allowed_functions import SCALAR_FUNCTIONS

# Table functions a read-only client may call in FROM (DuckDB's, generic and harmless).
TABLE_FUNCTIONS = frozenset(
    {
        "generate_series",
        "range",
        "unnest",
        "json_each",
        "json_tree",
        "repeat",
        "repeat_row",
        "pg_timezone_names",
        "icu_calendar_names",
    }
)

# Postgres set-returning functions the rewrite replaces when they stand in FROM (DuckDB has
# them as scalar functions or not at all), by their exact name. Empty until a rewrite does.
REWRITTEN_IN_FROM: frozenset[str] = frozenset()

# File readers: allowed only with a constant first argument naming a path inside the
# warehouse (42501 otherwise). DuckDB's allowed_directories draws the same line underneath.
WAREHOUSE_READERS = frozenset(
    {
        "read_csv", "read_csv_auto", "read_parquet", "parquet_scan", "read_json",
        "read_json_auto", "read_json_objects", "read_json_objects_auto", "read_ndjson",
        "read_ndjson_auto", "read_ndjson_objects", "read_text", "read_blob", "glob", "sniff_csv",
        "parquet_metadata", "parquet_schema", "parquet_file_metadata", "parquet_kv_metadata",
        "parquet_bloom_probe", "read_avro", "iceberg_scan", "iceberg_metadata",
        "iceberg_snapshots", "read_duckdb",
    }
)  # fmt: skip

# DuckDB forms written like calls that duckdb_functions() does not list.
SPECIAL_FORMS = frozenset({"unnest", "columns", "if", "ifnull", "try", "grouping_id", "unpack"})

# Functions Postgres's grammar writes for SQL syntax, which DuckDB reads as that syntax
# (`x SIMILAR TO p` parses as `x ~ pg_catalog.similar_to_escape(p)`; `TRIM(x)` as
# `pg_catalog.btrim(x)`, which the rewrite names `trim`; EXTRACT(f FROM x) as
# `pg_catalog.extract(f, x)`, printed back as that syntax).
SQL_SYNTAX = frozenset({"similar_to_escape", "btrim", "extract"})

# What no client may call, and why (42501). Checked before the allow-lists, so a name here
# stays refused even if a list above were to include it; the rewrite's own names
# (`REWRITTEN`) are checked first, because the client's call never reaches DuckDB.
_FILES = "reads or lists server files"
_SETTINGS = "shows server settings, paths or state"
_LOGGING = "changes or reads the server's logging or profiling"
_SQL = "runs or handles SQL text the server did not check"
_PYTHON = "is registered by the server's Python client"
_WRITES = "changes server state"
_SECRETS = "reads server credentials"
DENIED: dict[str, str] = {
    "getenv": _SETTINGS,
    "current_setting": _SETTINGS,
    "getvariable": _SETTINGS,
    "current_query": _SETTINGS,
    "which_secret": _SECRETS,
    "load_aws_credentials": _SECRETS,
    "enable_logging": _LOGGING,
    "disable_logging": _LOGGING,
    "truncate_duckdb_logs": _LOGGING,
    "enable_profiling": _LOGGING,
    "disable_profiling": _LOGGING,
    "write_log": _LOGGING,
    "parse_duckdb_log_message": _LOGGING,
    "query": _SQL,
    "query_table": _SQL,
    "json_execute_serialized_sql": _SQL,
    "json_serialize_plan": _SQL,
    "json_serialize_sql": _SQL,
    "json_deserialize_sql": _SQL,
    "pandas_scan": _PYTHON,
    "arrow_scan": _PYTHON,
    "arrow_scan_dumb": _PYTHON,
    "python_map_function": _PYTHON,
    "sb_quotient": _PYTHON,
    "sb_quotient_text": _PYTHON,
    "checkpoint": _WRITES,
    "force_checkpoint": _WRITES,
    "nextval": _WRITES,
    "currval": _WRITES,
    "set_iceberg_table_properties": _WRITES,
    "remove_iceberg_table_properties": _WRITES,
    "set_iceberg_schema_properties": _WRITES,
    "remove_iceberg_schema_properties": _WRITES,
    "iceberg_to_ducklake": _WRITES,
    "iceberg_load_table_response": _FILES,
    "iceberg_column_stats": _FILES,
    "iceberg_partition_stats": _FILES,
    "iceberg_table_properties": _FILES,
    "iceberg_schema_properties": _FILES,
    "iceberg_verify_equality_deletes": _FILES,
    "parquet_full_metadata": _FILES,
    "pg_read_file": _FILES,
    "pg_read_binary_file": _FILES,
    "pg_ls_dir": _FILES,
    "pg_stat_file": _FILES,
    "lo_import": _FILES,
    "lo_export": _FILES,
}
# Name prefixes refused the same way: DuckDB's system table functions and table macros.
DENIED_PREFIXES = {"duckdb_": _SETTINGS, "pragma_": _SETTINGS}

BUILTIN_SCHEMAS = frozenset({"pg_catalog", "information_schema", "main"})

# DuckDB's own information_schema views that streambed does not serve itself: they describe
# no server path or setting (empty here, or the UTF8 character set), and clients read them.
DUCKDB_INFORMATION_SCHEMA = frozenset(
    {
        "character_sets",
        "check_constraints",
        "constraint_column_usage",
        "constraint_table_usage",
        "referential_constraints",
    }
)

READ_ONLY_MESSAGE = "streambed is a read-only replica: {what} is not allowed"
_HINT = "the query server allows the SQL listed in docs/query-server.md (Allowed SQL)"


# Postgres functions the rewrite always replaces before DuckDB runs anything, by their exact
# (case-sensitive) name, as the rewrite matches them: a catalog function (COMPAT_FUNCTIONS
# go to streambed's macros) or a session function answered from the session.
REWRITTEN = (
    catalog.COMPAT_FUNCTIONS
    | catalog.SESSION_FUNCTIONS
    | rewrite.TOOL_FUNCTIONS
    | {"_pg_expandarray"}
)
# The schemas such a call may name and still be replaced.
_REWRITTEN_SCHEMAS: tuple[list[str], ...] = ([], ["pg_catalog"], ["information_schema"])


class GuardError(Exception):
    """A statement the allow-list refuses, with its SQLSTATE."""

    def __init__(self, message: str, sqlstate: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.hint = hint


@dataclass(frozen=True)
class Macros:
    """The macros streambed created (not DuckDB's own), as found in DuckDB after setup."""

    scalar: frozenset[tuple[str, str]]  # (schema, name)
    table: frozenset[tuple[str, str]]

    def __post_init__(self) -> None:
        # Called without a schema, DuckDB finds only those in `main` (the rewrite sends the
        # catalog's, COMPAT_FUNCTIONS, to their schema); a bare name of another schema's
        # macro could reach a DuckDB function of that name instead.
        bare = frozenset(n for s, n in self.scalar | self.table if s == "main")
        object.__setattr__(self, "qualified", self.scalar | self.table)
        object.__setattr__(self, "names", bare)
        object.__setattr__(self, "table_names", bare & {n for _, n in self.table})

    qualified: frozenset[tuple[str, str]] = field(init=False)
    names: frozenset[str] = field(init=False)  # callable without a schema
    table_names: frozenset[str] = field(init=False)

    @classmethod
    def of(cls, rows: Iterable[tuple[str, str, str]]) -> Macros:
        """From (schema, name, function_type) rows of duckdb_functions()."""
        scalar: set[tuple[str, str]] = set()
        table: set[tuple[str, str]] = set()
        for schema, name, kind in rows:
            (table if kind == "table_macro" else scalar).add((schema.lower(), name.lower()))
        return cls(frozenset(scalar), frozenset(table))


MACROS_QUERY = (
    "SELECT DISTINCT schema_name, function_name, function_type FROM duckdb_functions() "
    "WHERE function_type IN ('macro', 'table_macro') AND database_name <> 'system'"
)


@dataclass(frozen=True)
class Context:
    """What the check needs to know of the database and the session."""

    macros: Macros
    warehouse: str  # the warehouse root as DuckDB addresses it
    database: str
    search_path: tuple[str, ...]
    serves: Callable[[str, str], bool]  # a replicated (schema, table)


def check_statement(stmt: Any, context: Context) -> None:
    """Raise GuardError unless `stmt` (a SELECT, or what EXPLAIN / DECLARE hold) keeps to the
    allow-list."""
    if not isinstance(stmt, ast.SelectStmt):
        raise GuardError(READ_ONLY_MESSAGE.format(what=statement_name(stmt)), "25006")
    _Checker(context).node(stmt, frozenset())


_STATEMENT_NAMES = {
    "InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE", "MergeStmt": "MERGE",
    "CopyStmt": "COPY", "CreateStmt": "CREATE TABLE", "CreateTableAsStmt": "CREATE TABLE AS",
    "ViewStmt": "CREATE VIEW", "DropStmt": "DROP", "AlterTableStmt": "ALTER TABLE",
    "TruncateStmt": "TRUNCATE", "CreateSchemaStmt": "CREATE SCHEMA", "IndexStmt": "CREATE INDEX",
    "CreateFunctionStmt": "CREATE FUNCTION", "LoadStmt": "LOAD", "VacuumStmt": "VACUUM",
    "GrantStmt": "GRANT", "CreateSeqStmt": "CREATE SEQUENCE", "DoStmt": "DO",
    "CallStmt": "CALL", "RenameStmt": "ALTER ... RENAME", "CreateRoleStmt": "CREATE ROLE",
    "CreatedbStmt": "CREATE DATABASE", "DropdbStmt": "DROP DATABASE", "CheckPointStmt":
    "CHECKPOINT", "LockStmt": "LOCK", "CommentStmt": "COMMENT", "RefreshMatViewStmt":
    "REFRESH MATERIALIZED VIEW", "ClusterStmt": "CLUSTER", "ReindexStmt": "REINDEX",
}  # fmt: skip


def statement_name(stmt: Any) -> str:
    """How a refusal names a statement: INSERT, CREATE TABLE, ..."""
    name = type(stmt).__name__
    return _STATEMENT_NAMES.get(name, name.removesuffix("Stmt").upper() or name)


def _strings(names: Any) -> list[str]:
    return [n.sval or "" for n in names or () if isinstance(n, ast.String)]


def _denied(name: str) -> str | None:
    reason = DENIED.get(name)
    if reason is None:
        for prefix, why in DENIED_PREFIXES.items():
            if name.startswith(prefix):
                return why
    return reason


def inside(path: str, root: str) -> bool:
    """Whether `path` (a file path or URI) is inside the directory or prefix `root`."""
    path = path.removeprefix("file://")  # the lake's URIs are not percent-encoded
    root = root.removeprefix("file://")
    if "://" in root:
        return path.startswith(root.rstrip("/") + "/")
    if "://" in path:
        return False
    resolved = str(Path(path).resolve())
    return (resolved + "/").startswith(str(Path(root).resolve()) + "/")


_ATTRIBUTES: dict[type, tuple[str, ...]] = {}


def _node_attributes(cls: type) -> tuple[str, ...]:
    """The attributes of a node class that may hold nodes (pointers and lists; not strings,
    numbers, flags or enums): the walk skips the rest."""
    found = _ATTRIBUTES.get(cls)
    if found is None:
        slots: dict[str, Any] = getattr(cls, "__slots__", {})
        found = tuple(name for name, info in slots.items() if _may_hold_nodes(info))
        _ATTRIBUTES[cls] = found
    return found


def _may_hold_nodes(info: Any) -> bool:
    c_type = str(getattr(info, "c_type", "*"))
    if c_type.endswith("*") and c_type != "char*":
        return True
    types = getattr(info, "py_type", ())
    for kind in types if isinstance(types, tuple) else (types,):
        if isinstance(kind, type) and (issubclass(kind, ast.Node) or kind in (list, tuple)):
            return True
    return False


class _Checker:
    def __init__(self, context: Context) -> None:
        self.context = context

    def node(self, node: Any, ctes: frozenset[str]) -> None:
        if isinstance(node, tuple | list):
            for item in node:
                self.node(item, ctes)
            return
        if not isinstance(node, ast.Node):
            return
        if type(node).__name__ in _STATEMENT_NAMES:
            raise GuardError(READ_ONLY_MESSAGE.format(what=statement_name(node)), "25006")
        if isinstance(node, ast.SelectStmt):
            self.select(node, ctes)
        elif isinstance(node, ast.RangeVar):
            self.relation(node, ctes)
        elif isinstance(node, ast.RangeFunction):
            self.range_function(node, ctes)
        elif isinstance(node, ast.FuncCall):
            self.function(node, table=False)
            self.children(node, ctes)
        else:
            self.children(node, ctes)

    def children(self, node: ast.Node, ctes: frozenset[str], skip: str = "") -> None:
        for attr in _node_attributes(type(node)):
            if attr != skip:
                self.node(getattr(node, attr), ctes)

    def select(self, node: ast.SelectStmt, ctes: frozenset[str]) -> None:
        if node.intoClause is not None:
            raise GuardError(READ_ONLY_MESSAGE.format(what="SELECT INTO"), "25006")
        if node.lockingClause:
            raise GuardError(READ_ONLY_MESSAGE.format(what="SELECT FOR UPDATE"), "25006")
        with_clause = node.withClause
        if with_clause is not None:
            items = [c for c in with_clause.ctes or () if isinstance(c, ast.CommonTableExpr)]
            names = [(c.ctename or "") for c in items]
            for i, cte in enumerate(items):
                # a CTE sees the ones before it (all of them, and itself, WITH RECURSIVE)
                visible = names if with_clause.recursive else names[:i]
                self.node(cte.ctequery, ctes | frozenset(visible))
            ctes = ctes | frozenset(names)
        self.children(node, ctes, skip="withClause")

    def relation(self, node: ast.RangeVar, ctes: frozenset[str]) -> None:
        context = self.context
        name = node.relname or ""
        schema = node.schemaname
        shown = f"{schema}.{name}" if schema else name
        if node.catalogname is not None and node.catalogname != context.database:
            raise GuardError(
                f"cross-database references are not implemented: {node.catalogname}.{shown}",
                "0A000",
            )
        if schema is None:
            if name in ctes or name in catalog.CATALOG_RELATIONS:
                return
            if any(context.serves(s, name) for s in context.search_path):
                return
        elif schema == "pg_catalog":
            if name in catalog.CATALOG_RELATIONS:
                return
        elif schema == "information_schema":
            if name in catalog.INFORMATION_SCHEMA_RELATIONS or name in DUCKDB_INFORMATION_SCHEMA:
                return
        elif schema in (catalog.SCHEMA, catalog.INFO_SCHEMA) or context.serves(schema, name):
            return
        if "/" in name or "." in name:
            raise GuardError(f'reading files is not allowed: "{name}" is not a table', "42501")
        raise GuardError(f'relation "{shown}" does not exist', "42P01")

    def range_function(self, node: ast.RangeFunction, ctes: frozenset[str]) -> None:
        for item in node.functions or ():
            for part in item if isinstance(item, tuple) else (item,):
                if isinstance(part, ast.FuncCall):
                    self.function(part, table=True)
                    self.children(part, ctes)
                else:
                    self.node(part, ctes)
        self.children(node, ctes, skip="functions")

    def function(self, node: ast.FuncCall, *, table: bool) -> None:
        parts = _strings(node.funcname)
        exact = parts[-1] if parts else ""
        if parts[:-1] in _REWRITTEN_SCHEMAS and (
            exact in REWRITTEN or (table and exact in REWRITTEN_IN_FROM)
        ):
            return  # replaced by the rewrite; DuckDB never sees the call
        if table and exact in rewrite_tools.SCALAR_IN_FROM:
            table = False  # the rewrite calls it as a scalar, in a one-row subquery
        lowered = [p.lower() for p in parts]
        name = lowered[-1] if lowered else ""
        schema = lowered[-2] if len(lowered) > 1 else None
        shown = ".".join(parts)
        if len(parts) > 2:
            raise GuardError(f"cross-database references are not implemented: {shown}", "0A000")
        if table and parts[-2:] == [timetravel.SCHEMA, exact] and exact in timetravel.FUNCTIONS:
            return  # resolved by the rewrite to the table's own snapshot
        reason = _denied(name)
        if reason is not None:
            raise GuardError(f"function {shown}() is not allowed: it {reason}", "42501", _HINT)
        macros = self.context.macros
        if schema is not None and schema not in BUILTIN_SCHEMAS:
            if (schema, name) in macros.qualified:
                return
            raise GuardError(f"function {shown}() does not exist", "42883", _HINT)
        if name in WAREHOUSE_READERS:
            self.file_argument(name, node)
            return
        if table:
            # only table functions: DuckDB has table macros named like aggregates
            # (histogram(table_name, column) reads any relation named by a string)
            allowed = name in TABLE_FUNCTIONS or name in macros.table_names
        else:
            allowed = (
                name in SCALAR_FUNCTIONS
                or name in SPECIAL_FORMS
                or name in SQL_SYNTAX
                or name in macros.names
            )
        if not allowed:
            kind = "table function" if table else "function"
            raise GuardError(f"{kind} {shown}() does not exist", "42883", _HINT)

    def file_argument(self, name: str, node: ast.FuncCall) -> None:
        args = node.args or ()
        first = args[0] if args else None
        path = None
        if isinstance(first, ast.A_Const) and isinstance(first.val, ast.String):
            path = first.val.sval
        if path is None or not inside(path, self.context.warehouse):
            raise GuardError(
                f"{name}() may only read the lake's own files; query the replicated tables "
                f"(e.g. SELECT * FROM public.orders) instead",
                "42501",
            )
