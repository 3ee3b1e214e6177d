"""SQL connections for copying, with the replication session's output settings.

pgoutput renders values with the walsender's settings (`SESSION_OPTIONS`: ISO dates, UTC,
shortest exact floats, hex bytea) and UTF-8; the copy must render them the same way so that
one conversion (`streambed.lake.convert`) serves both.

A copy session also turns Postgres's JIT off (`COPY_OPTIONS`). A range of a large table is
planned above `jit_above_cost`, and compiled expressions and tuple deforming made the
backend's scan and binary COPY slower, not faster, optimized or not. The ranges DuckDB's
own scanner reads are small enough to stay below the threshold.

And it turns row security off, as pg_dump does: a table whose row-level security policies
apply to the role then fails its copy ("query would be affected by row-level security
policy") instead of copying only the rows the policies let the role see, while the stream,
which policies do not filter, sends changes to all of them. `streambed.copy.catalog`
refuses such a table before its copy; this catches a policy turned on after that check.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from streambed.core.errors import Kind
from streambed.source.connection import SESSION_OPTIONS, join_options, source_error

CONNECT_FAILED = re.compile(r"connection to server (at|on socket) .*? failed:", re.S)
"""libpq's words on a connection it could not open (`connection to server at "host", port N
failed: ...`): the source could not be reached, or refused the login."""

COPY_OPTIONS = f"{SESSION_OPTIONS} -c jit=off -c row_security=off"
"""The copy sessions' settings: the replication session's, no JIT and no row security (the
module's doc)."""


def copy_params(url: str, application_name: str) -> dict[str, str]:
    """libpq keywords of `url` with the replication session's output settings, for the copy
    clients that take keywords (psql's service file, DuckDB's ATTACH)."""
    params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    params["options"] = join_options(params.get("options", ""), COPY_OPTIONS)
    params["client_encoding"] = "UTF8"
    params["application_name"] = application_name[:63]
    params.setdefault("connect_timeout", "10")
    return params


def private_file(path: str, text: str) -> None:
    """Create `path` (it must not exist) readable by this user only, holding `text`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


@contextlib.contextmanager
def secret_file(text: str) -> Iterator[tuple[int | None, str]]:
    """A file holding `text` (a password, a service file) for libpq, as `(fd, path)`, while
    the context is open.

    On Linux it exists only in memory (`memfd_create`, mode 0600): `path` is
    `/proc/self/fd/<fd>`, which libpq in this process opens, and so does a child process
    given the descriptor (`pass_fds=(fd,)`). A copy task killed while it reads (streambed
    stopped or killed mid-copy, Spark ending its workers) leaves no credentials on disk.
    Elsewhere: a 0600 file in a private temporary directory, removed when the context
    closes (fd None)."""
    if not hasattr(os, "memfd_create"):
        with tempfile.TemporaryDirectory(prefix="streambed-copy-") as tmp:
            path = os.path.join(tmp, "secret")
            private_file(path, text)
            yield None, path
        return
    fd = os.memfd_create("streambed-secret", os.MFD_CLOEXEC)
    try:
        os.fchmod(fd, 0o600)
        data = memoryview(text.encode())
        while data:
            data = data[os.write(fd, data) :]
        yield fd, f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def copy_connect(url: str, application_name: str) -> psycopg.Connection[Any]:
    """A connection (not autocommit) with the replication session's output settings."""
    try:
        given = str(conninfo_to_dict(url).get("options") or "")
    except psycopg.ProgrammingError:
        given = ""
    try:
        return psycopg.connect(
            url,
            options=join_options(given, COPY_OPTIONS),
            client_encoding="UTF8",
            application_name=application_name[:63],
            connect_timeout=10,
        )
    except psycopg.OperationalError as e:
        raise source_error(url, "connecting to the source to copy", str(e)) from e
    except psycopg.Error as e:
        raise source_error(
            url, "connecting to the source to copy", str(e), Kind.SOURCE_SETUP
        ) from e
