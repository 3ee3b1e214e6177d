"""`streambed sweep`: remove the lake's unreferenced files (`streambed.lake.sweep`)."""

from __future__ import annotations

from typing import TextIO

from streambed.core.config import Settings


def sweep(settings: Settings, older_than: float | None, *, dry_run: bool, out: TextIO) -> None:
    """Delete (`dry_run`: list) each table's unreferenced data and metadata files older than
    `older_than` seconds (None: `STREAMBED_SWEEP_MIN_AGE`; `streambed.lake.sweep`); writes
    one line per table to `out`.
    Raises `SweepRefused` after the report when a table could not be swept."""
    from streambed.lake.sweep import SweepRefused
    from streambed.lake.sweep import sweep as sweep_tables

    results = sweep_tables(settings, older_than=older_than, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for r in results:
        if r.refused is not None:
            out.write(f"{r.table}: refused, nothing deleted: {r.refused}\n")
        else:
            out.write(
                f"{r.table}: {verb} {len(r.removed)} files and "
                f"{len(r.removed_metadata)} metadata files ({r.removed_bytes:,} bytes), "
                f"kept {r.kept}\n"
            )
        if dry_run:
            out.writelines(f"  {path}\n" for path in [*r.removed, *r.removed_metadata])
    if not results:
        out.write("no tables: nothing to sweep\n")
    refused = [r.table for r in results if r.refused is not None]
    if refused:
        raise SweepRefused(f"sweep refused for {', '.join(refused)}: see the lines above")
