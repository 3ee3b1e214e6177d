"""Postgres SQL parsing (pglast) on one long-lived thread.

pglast's C library, libpg_query, sets up its memory the first time a thread parses and
registers a pthread key whose destructor frees it when that thread ends: one key per
thread, never deleted. A process has 1024 keys (glibc's `PTHREAD_KEYS_MAX`), and the
query server serves each connection on a thread of its own. So after about a thousand
connections the process had none left, and the next libpq connection it made (the
replication stream reconnecting, a copy's reader) failed in OpenSSL: "could not generate
nonce". Every call into libpg_query therefore runs on one thread that lives as long as
the process, which costs one key in all. Its errors (`pglast.parser.ParseError`) reach
the caller as they are.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pglast
from pglast import ast, parser

T = TypeVar("T")

_PARSER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streambed-sql-parser")
_on_parser = threading.local()


def _mark() -> None:
    _on_parser.yes = True


_PARSER.submit(_mark).result()


def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    if getattr(_on_parser, "yes", False):
        return fn(*args, **kwargs)
    return _PARSER.submit(fn, *args, **kwargs).result()


def parse_sql(sql: str) -> tuple[ast.RawStmt, ...]:
    """`pglast.parse_sql`."""
    return _run(pglast.parse_sql, sql)


def split(sql: str, *, with_parser: bool = True) -> list[str]:
    """`pglast.split`, as a list."""
    return _run(lambda: list(pglast.split(sql, with_parser=with_parser)))


def scan(sql: str) -> list[Any]:
    """`pglast.parser.scan`: the statement's tokens."""
    return _run(lambda: list(parser.scan(sql)))
