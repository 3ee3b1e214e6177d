"""The query server: replicated Iceberg tables served over the Postgres wire protocol.

`database` is the database side (DuckDB, views, sessions, sandbox); `wire` is the protocol.
"""

from streambed.server.database import (
    ColumnInfo,
    DatabaseSettings,
    DbSession,
    LakeDatabase,
    QueryError,
    QueryResult,
    ServedWatermark,
    SnapshotProvider,
)
from streambed.server.version import version_string

__all__ = [
    "ColumnInfo",
    "DatabaseSettings",
    "DbSession",
    "LakeDatabase",
    "QueryError",
    "QueryResult",
    "ServedWatermark",
    "SnapshotProvider",
    "version_string",
]
