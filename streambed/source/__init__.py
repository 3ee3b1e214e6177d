"""The replication source: connections, setup and catalog queries, the stream, heartbeats.

Everything that talks to the source Postgres lives here; the decoder (`streambed.pgoutput`)
stays pure and gets the payload bytes of `XLogData`.
"""

from streambed.source.connection import (
    CreatedSlot,
    ReplicationConnection,
    SystemIdentity,
    classify,
    sql_connect,
)
from streambed.source.heartbeat import HEARTBEAT_PREFIX, Heartbeat
from streambed.source.setup import (
    PublicationResult,
    PublishedTable,
    SlotPosition,
    SlotResult,
    SourceKey,
    check_source,
    current_wal_lsn,
    ensure_publication,
    ensure_slot,
    publication_tables,
    slot_position,
    table_key,
)
from streambed.source.stream import Keepalive, ReplicationStream, XLogData

__all__ = [
    "HEARTBEAT_PREFIX",
    "CreatedSlot",
    "Heartbeat",
    "Keepalive",
    "PublicationResult",
    "PublishedTable",
    "ReplicationConnection",
    "ReplicationStream",
    "SlotPosition",
    "SlotResult",
    "SourceKey",
    "SystemIdentity",
    "XLogData",
    "check_source",
    "classify",
    "current_wal_lsn",
    "ensure_publication",
    "ensure_slot",
    "publication_tables",
    "slot_position",
    "sql_connect",
    "table_key",
]
