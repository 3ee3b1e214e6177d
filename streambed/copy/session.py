"""SQL connections for copying, with the replication session's output settings.

pgoutput renders values with the walsender's settings (`SESSION_OPTIONS`: ISO dates, UTC,
shortest exact floats, hex bytea) and UTF-8; the copy must render them the same way so that
one conversion (`streambed.lake.convert`) serves both.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from streambed.errors import Kind
from streambed.replication.connection import SESSION_OPTIONS, source_error


def copy_params(url: str, application_name: str) -> dict[str, str]:
    """libpq keywords of `url` with the replication session's output settings, for the copy
    clients that take keywords (psql's service file, DuckDB's ATTACH)."""
    params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    params["options"] = f"{params.get('options', '')} {SESSION_OPTIONS}".strip()
    params["client_encoding"] = "UTF8"
    params["application_name"] = application_name[:63]
    params.setdefault("connect_timeout", "10")
    return params


def private_file(path: str, text: str) -> None:
    """Create `path` (it must not exist) readable by this user only, holding `text`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def copy_connect(url: str, application_name: str) -> psycopg.Connection[Any]:
    """A connection (not autocommit) with the replication session's output settings."""
    try:
        given = str(conninfo_to_dict(url).get("options") or "")
    except psycopg.ProgrammingError:
        given = ""
    try:
        return psycopg.connect(
            url,
            options=f"{given} {SESSION_OPTIONS}".strip(),
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
