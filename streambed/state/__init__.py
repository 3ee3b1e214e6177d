"""Replication progress (table registry, frontiers, watermarks) in a local SQLite file."""

from streambed.state.store import STATUSES, StateStore, Status, TableState, Watermark

__all__ = ["STATUSES", "StateStore", "Status", "TableState", "Watermark"]
