"""`streambed status`: the tables' states and frontiers, and the slot as the source sees it."""

from __future__ import annotations

from streambed.core.config import Settings
from streambed.core.errors import SourceError
from streambed.core.lsn import format_lsn
from streambed.source import setup
from streambed.source.connection import sql_connect
from streambed.source.slot_watch import margin_warning, size_text
from streambed.state.store import StateStore


def status(settings: Settings) -> str:
    """The tables' states and frontiers (the state store), the tables it no longer streams,
    then the slot as the source sees it (`slot_lines`)."""
    state = StateStore(settings.state_path)
    try:
        tables = state.tables()
        lines = [f"{'table':40} {'status':8} {'frontier':>18}  updated"]
        for t in tables:
            frontier = format_lsn(t.frontier_lsn) if t.frontier_lsn is not None else "-"
            lines.append(f"{t.qualified:40} {t.status:8} {frontier:>18}  {t.updated_at}")
        mark = state.latest_watermark()
        if mark is not None:
            lines.append(f"watermark {format_lsn(mark.lsn)} at {mark.committed_at}")
        forgotten = [f"{schema}.{name}" for schema, name in state.forgotten()]
        if forgotten:
            lines.append(
                "no longer streamed (lake tables kept, not served, still swept): "
                + ", ".join(forgotten)
            )
        lines.extend(slot_lines(settings, streamed=any(t.status == "ready" for t in tables)))
        return "\n".join(lines) + "\n"
    finally:
        state.close()


def slot_lines(settings: Settings, *, streamed: bool) -> list[str]:
    """The slot: whether a client streams from it, the WAL it holds, how much more the
    source lets it hold before invalidating it, and what a missing or invalidated slot
    means for the lake (`streamed`: tables were streamed from it)."""
    slot = settings.slot
    try:
        with sql_connect(settings.source_url, timeout=5) as conn:
            health = setup.slot_health(conn, slot)
    except SourceError as e:
        return [f"slot {slot}: cannot ask the source: {e}"]
    if health is None:
        return [
            f"slot {slot}: missing"
            + (": the next start creates it and copies every table again" if streamed else "")
        ]
    line = (
        f"slot {slot}: {'streaming' if health.active else 'idle'}, wal_status "
        f"{health.wal_status}, {size_text(health.unacknowledged)} not acknowledged, "
        f"{size_text(health.retained)} of WAL retained"
    )
    if health.safe_wal_size is not None:
        line += f", {size_text(health.safe_wal_size)} more before the source may invalidate it"
    lines = [line]
    if health.wal_status == "lost":
        lines.append(
            f"slot {slot}: invalidated by the source (max_slot_wal_keep_size); the next start "
            "replaces it and copies every table again"
        )
    warning = margin_warning(slot, health)
    if warning is not None:
        lines.append(f"warning: {warning}")
    return lines
