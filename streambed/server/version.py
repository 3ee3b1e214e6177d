"""Which Postgres version the query server says it is: the one place that decides it.

Clients read it in four forms, which must agree: the `server_version` ParameterStatus at
startup (pgjdbc and libpq, hence psycopg, take the major and minor version from it; libpq
computes `server_version_num` as major * 10000 + minor), `SHOW server_version` and
`current_setting('server_version_num')` (Grafana and pgjdbc's metadata queries), and
`version()` (SQLAlchemy matches `PostgreSQL (\\d+)\\.?(\\d+)?` in it). So `server_version`
is only numbers and one dot, and streambed's own name and version stand after it in
`version()` only.
"""

from __future__ import annotations

from typing import Final

import duckdb

from streambed import __version__

SERVER_VERSION: Final = "15.0"
"""The Postgres release whose catalogs and behaviour the query server follows."""


def version_num(version: str) -> int:
    """`server_version_num` for a `server_version` of two numbers, as libpq computes it."""
    major, _, minor = version.partition(".")
    return int(major) * 10_000 + int(minor or 0)


SERVER_VERSION_NUM: Final = str(version_num(SERVER_VERSION))


def version_string() -> str:
    """What version() answers."""
    return (
        f"PostgreSQL {SERVER_VERSION} (streambed {__version__} on DuckDB "
        f"{duckdb.__version__}) on x86_64-pc-linux-gnu, compiled by streambed, 64-bit"
    )
