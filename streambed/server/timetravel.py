"""Time travel: read a replicated table as it was at a snapshot, a time, or a source LSN.

Documented syntax (table functions in the `streambed` schema):

    SELECT * FROM streambed.at_snapshot('public.orders', 4087337066411405621);
    SELECT * FROM streambed.at_time('public.orders', '2024-05-01 12:00:00+00');
    SELECT * FROM streambed.at_lsn('public.orders', '16/B374D848');

Arguments are constants or `$n` parameters. Each call is resolved, in Python, to the
Iceberg snapshot id it means (the newest snapshot committed at or before the time; the
newest snapshot whose summary property `streambed.lsn` is <= the LSN) and rewritten to
`iceberg_scan('<metadata location>', snapshot_from_id := <id>)` over the table's current
metadata. When no snapshot qualifies, the query fails with a message that says why.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from streambed.core.errors import ConfigError
from streambed.core.lsn import parse_lsn
from streambed.core.names import name_parts

FUNCTIONS = frozenset({"at_snapshot", "at_time", "at_lsn"})
SCHEMA = "streambed"
LSN_PROPERTY = "streambed.lsn"


class TimeTravelError(Exception):
    """A time-travel call cannot be answered (unknown table, no qualifying snapshot)."""

    def __init__(self, message: str, sqlstate: str = "22023") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    timestamp_ms: int
    lsn: int | None


SnapshotLoader = Callable[[str], list[SnapshotInfo]]


def load_snapshots(metadata_location: str, properties: Mapping[str, str]) -> list[SnapshotInfo]:
    """Snapshots of an Iceberg table, read from its metadata file with pyiceberg."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location, dict(properties))
    result = []
    for snapshot in table.metadata.snapshots:
        lsn: int | None = None
        summary = snapshot.summary
        raw = summary.get(LSN_PROPERTY) if summary is not None else None
        if raw:
            lsn = _parse_lsn_value(str(raw))
        result.append(SnapshotInfo(snapshot.snapshot_id, snapshot.timestamp_ms, lsn))
    return sorted(result, key=lambda s: (s.timestamp_ms, s.snapshot_id))


def _parse_lsn_value(raw: str) -> int | None:
    try:
        return parse_lsn(raw) if "/" in raw else int(raw)
    except (ConfigError, ValueError):
        return None


def _timestamp_ms(value: Any) -> int:
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip().replace(" ", "T", 1)
        if text.endswith(("+00", "-00")) or (
            len(text) > 3 and text[-3] in "+-" and ":" not in text[-3:]
        ):
            text += ":00"
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError as e:
            raise TimeTravelError(
                f"streambed.at_time: {value!r} is not a timestamp; "
                "use e.g. '2024-05-01 12:00:00+00'",
                "22007",
            ) from e
    else:
        raise TimeTravelError("streambed.at_time: the second argument must be a timestamp", "22023")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def resolve_snapshot(function: str, table: str, snapshots: list[SnapshotInfo], value: Any) -> int:
    """The snapshot id `streambed.<function>(table, value)` reads."""
    if not snapshots:
        raise TimeTravelError(f"table {table} has no snapshots yet", "22023")
    if function == "at_snapshot":
        try:
            wanted = int(value)
        except (TypeError, ValueError) as e:
            raise TimeTravelError(f"streambed.at_snapshot: {value!r} is not a snapshot id") from e
        if not any(s.snapshot_id == wanted for s in snapshots):
            known = ", ".join(str(s.snapshot_id) for s in snapshots[-5:])
            raise TimeTravelError(
                f"table {table} has no snapshot {wanted} (expired or never existed); "
                f"recent snapshots: {known}"
            )
        return wanted
    if function == "at_time":
        limit = _timestamp_ms(value)
        older = [s for s in snapshots if s.timestamp_ms <= limit]
        if not older:
            first = dt.datetime.fromtimestamp(snapshots[0].timestamp_ms / 1000, dt.UTC)
            raise TimeTravelError(
                f"table {table} has no snapshot at or before {value}; "
                f"its oldest retained snapshot is from {first.isoformat()}"
            )
        return older[-1].snapshot_id
    if function == "at_lsn":
        try:
            lsn = parse_lsn(str(value)) if "/" in str(value) else int(value)
        except (ConfigError, ValueError) as e:
            raise TimeTravelError(
                f"streambed.at_lsn: {value!r} is not an LSN; use the form '16/B374D848'"
            ) from e
        with_lsn = [s for s in snapshots if s.lsn is not None]
        qualifying = [s for s in with_lsn if s.lsn is not None and s.lsn <= lsn]
        if not qualifying:
            if not with_lsn:
                raise TimeTravelError(f"table {table} has no snapshot recording a source LSN")
            oldest = min(s.lsn for s in with_lsn if s.lsn is not None)
            from streambed.core.lsn import format_lsn

            raise TimeTravelError(
                f"table {table} has no snapshot at or before LSN {value}; "
                f"the oldest retained snapshot covers LSN {format_lsn(oldest)}"
            )
        return max(qualifying, key=lambda s: (s.lsn or 0, s.timestamp_ms)).snapshot_id
    raise TimeTravelError(f"unknown time-travel function streambed.{function}", "42883")


def split_table_name(name: str) -> tuple[str, str]:
    """(schema, table) of a time travel function's first argument: `table` (in public) or
    `schema.table`, as `streambed.core.names` reads them. Raises TimeTravelError otherwise."""
    parts = name_parts(name)
    if parts is None or len(parts) > 2:
        raise TimeTravelError(
            f"{name!r} is not a table name: write 'table' or 'schema.table', quoting a part "
            'that holds a dot or a quote in double quotes (public."dot.ted")',
            "42602",
        )
    return ("public", parts[0]) if len(parts) == 1 else (parts[0], parts[1])
