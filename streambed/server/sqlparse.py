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

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pglast
from pglast import ast, parser

T = TypeVar("T")

_lock = threading.Lock()
_parser: ThreadPoolExecutor | None = None  # started at the first parse
_local = threading.local()


def _mark() -> None:
    _local.parser = True


def _forget() -> None:
    """In a forked child: the parent's parser thread is not there, so start another."""
    global _lock, _parser
    _lock, _parser = threading.Lock(), None


os.register_at_fork(after_in_child=_forget)


def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    global _parser
    if getattr(_local, "parser", False):  # already on it (a call from within a call)
        return fn(*args, **kwargs)
    with _lock:
        if _parser is None:
            _parser = ThreadPoolExecutor(1, "streambed-sql-parser", initializer=_mark)
        executor = _parser
    return executor.submit(fn, *args, **kwargs).result()


def parse_sql(sql: str) -> tuple[ast.RawStmt, ...]:
    """`pglast.parse_sql`."""
    return _run(pglast.parse_sql, sql)


def split(sql: str, *, with_parser: bool = True) -> list[str]:
    """`pglast.split`, as a list."""
    return _run(lambda: list(pglast.split(sql, with_parser=with_parser)))


def scan(sql: str) -> list[Any]:
    """`pglast.parser.scan`: the statement's tokens."""
    return _run(lambda: list(parser.scan(sql)))
