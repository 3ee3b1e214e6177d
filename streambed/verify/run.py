"""`streambed verify`: the rounds, the waiting, and the report (see `streambed.verify`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

from streambed.core.config import Settings
from streambed.core.errors import ConfigError, StateError
from streambed.core.log import log
from streambed.core.lsn import format_lsn, parse_lsn
from streambed.core.names import name_parts, qualified
from streambed.source.connection import sql_connect
from streambed.source.heartbeat import Heartbeat
from streambed.state.store import StateStore
from streambed.verify import hashing, lake
from streambed.verify.hashing import Bucket, Difference, Row, Summary
from streambed.verify.inflight import Cut
from streambed.verify.overlay import Overlay
from streambed.verify.source import SourceReader, SourceTable

MAX_READ_BUCKETS = 64  # differing buckets read row by row per table
SHOWN = 5  # differing rows printed per table
POLL = 0.2

Name = tuple[str, str]
T = TypeVar("T")
logger = logging.getLogger("streambed.verify")


@dataclass
class TableResult:
    name: Name
    rows: int = 0
    differences: list[Difference] = field(default_factory=list)
    problem: str = ""  # a difference that is not a row (columns)
    more: bool = False  # more differing buckets than were read
    unproven: bool = False  # not compared: its columns changed while verify ran
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return not self.differences and not self.problem and not self.unproven


@dataclass
class Report:
    results: list[TableResult]
    lsn: int

    @property
    def differs(self) -> bool:
        return any(not r.equal for r in self.results)

    def text(self) -> str:
        lines = []
        for r in self.results:
            if r.equal:
                continue
            name = qualified(*r.name)
            lines.append(f"{name}: {'NOT COMPARED' if r.unproven else 'DIFFERS'}")
            if r.problem:
                lines.append(f"  {r.problem}")
            for d in r.differences[:SHOWN]:
                lines.append(f"  key {_tuple(d.key)}:")
                lines.append(f"    source: {_side(d.source, d.source_count)}")
                lines.append(f"    lake:   {_side(d.lake, d.lake_count)}")
            hidden = len(r.differences) - SHOWN
            if hidden > 0 or r.more:
                lines.append(f"  ... and {'more' if r.more else hidden} other differing rows")
            if r.unproven:
                lines.append("  run verify again")
            else:
                lines.append(f"  to repair it, run: streambed resync {name}")
        equal = sum(r.equal for r in self.results)
        lines.append(
            f"verified {len(self.results)} tables at LSN {format_lsn(self.lsn)}: {equal} equal, "
            f"{len(self.results) - equal} differ"
        )
        return "\n".join(lines) + "\n"


def _tuple(values: Sequence[str | None]) -> str:
    return "(" + ", ".join("NULL" if v is None else repr(_cut(v)) for v in values) + ")"


def _cut(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _side(values: Sequence[str | None] | None, count: int) -> str:
    if values is None:
        return "no such row"
    return _tuple(values) + ("" if count == 1 else f" ({count} times)")


def verify(settings: Settings, tables: Sequence[str], timeout: float, progress: TextIO) -> Report:
    """Compare the named tables (every table of the state store when none) between the
    source and the lake."""
    if not settings.state_path.exists():
        raise ConfigError(
            f"no state store at {settings.state_path}: verify compares what a `streambed "
            "run` with this STREAMBED_DATA_DIR replicated"
        )
    from streambed.lake.catalog import open_catalog

    catalog = open_catalog(settings)
    with StateStore(settings.state_path) as state:
        names = _names(state, tables)
        begun = time.monotonic()
        cut = Cut.take(settings.source_url, settings.publication, set(names))
        try:
            log(logger, "verify snapshot taken", lsn=format_lsn(cut.target), seconds=_since(begun))
            _nudge(settings.source_url)
            _wait(state, names, cut.target, timeout, lambda: _acknowledged(settings))
            plans = {name: lake.lake_table(catalog.load_table(name), cut.target) for name in names}
            limits = {n: p.lsn for n, p in plans.items() if p.lsn > cut.target}
            log(logger, "verify: the lake holds the snapshot's LSN", seconds=_since(begun))
            cut.read_until(limits, timeout)
            if limits:
                log(logger, "verify: changes after the snapshot read", seconds=_since(begun))
            results = []
            for name in names:
                started = time.monotonic()
                result = TableResult(name)
                _compare(settings, cut, name, plans[name], result)
                result.seconds = time.monotonic() - started
                _progress(progress, result)
                results.append(result)
        finally:
            cut.close()
    return Report(results, cut.target)


def _since(begun: float) -> str:
    return f"{time.monotonic() - begun:.2f}"


def _progress(out: TextIO, r: TableResult) -> None:
    verdict = "equal" if r.equal else "not compared" if r.unproven else "DIFFERS"
    out.write(f"{qualified(*r.name)}: {r.rows} rows, {verdict} ({r.seconds:.1f} s)\n")
    out.flush()


def _names(state: StateStore, tables: Sequence[str]) -> list[Name]:
    known = {(t.schema, t.name) for t in state.tables()}
    if not tables:
        return sorted(known)
    names: list[Name] = []
    for text in tables:
        parts = name_parts(text)
        if parts is None or len(parts) != 2:
            raise ConfigError(
                f"verify needs schema-qualified table names (public.orders), not {text!r}; "
                'a part holding a dot goes in double quotes (public."dot.ted")'
            )
        name = (parts[0], parts[1])
        if name not in known:
            listed = ", ".join(qualified(*n) for n in sorted(known)) or "none"
            raise ConfigError(
                f"{qualified(*name)} is not a table streambed replicates (it replicates: {listed})"
            )
        if name not in names:
            names.append(name)
    return names


def _acknowledged(settings: Settings) -> int:
    """The LSN `streambed run` acknowledged to its slot (-1: none): it acknowledges only
    what is durable in the lake, and moves on with heartbeats while no table changes."""
    with sql_connect(settings.source_url) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (settings.slot,),
        ).fetchone()
    return -1 if row is None or row[0] is None else parse_lsn(str(row[0]))


def _nudge(url: str) -> None:
    """A heartbeat after the cut: an idle `streambed run` acknowledges past it and reports
    that at once (see `streambed.pipeline`), not at its next heartbeat and status update."""
    beat = Heartbeat(url, 0)
    try:
        beat.beat()
    finally:
        beat.close()


def _wait(
    state: StateStore,
    names: list[Name],
    target: int,
    timeout: float,
    acknowledged: Callable[[], int],
) -> None:
    """Wait until the lake holds every table up to `target`: a table's frontier, the latest
    watermark, or what the slot acknowledged is at or past it (the lake then holds every
    transaction committed up to `target`)."""
    deadline = time.monotonic() + timeout
    while True:
        mark = state.latest_watermark()
        acked = acknowledged()
        behind: list[str] = []
        copying: list[str] = []
        for schema, name in names:
            table = state.table(schema, name)
            if table is None:
                raise StateError(f"{qualified(schema, name)} is no longer replicated")
            if table.status != "ready" or state.resync_requested(schema, name):
                copying.append(qualified(schema, name))  # or about to be: a resync asked
                continue
            covered = table.frontier_lsn if table.frontier_lsn is not None else -1
            if mark is not None and qualified(schema, name) in mark.tables:
                covered = max(covered, mark.lsn)
            covered = max(covered, acked - 1)
            if covered < target:
                behind.append(qualified(schema, name))
        if not behind and not copying:
            return
        if time.monotonic() >= deadline:
            if copying:
                raise StateError(
                    f"still being copied after {timeout:g} s: {', '.join(copying)}; run "
                    "verify again when `streambed status` shows them ready"
                )
            raise StateError(
                f"the lake did not reach the source's LSN {format_lsn(target)} within "
                f"{timeout:g} s ({', '.join(behind)} behind; latest watermark "
                f"{format_lsn(mark.lsn) if mark else 'none'}): is `streambed run` running "
                "and keeping up? (--timeout sets the limit)"
            )
        time.sleep(POLL)


def _both(source: Callable[[], T], lake_side: Callable[[], Any], what: str = "") -> tuple[T, Any]:
    """Both sides at once; with `what`, each side's seconds are logged."""
    begun = time.monotonic()

    def timed(side: Callable[[], Any]) -> tuple[Any, str]:
        out = side()
        return out, _since(begun)

    with ThreadPoolExecutor(2, thread_name_prefix="streambed-verify") as pool:
        a = pool.submit(timed, source)
        b = pool.submit(timed, lake_side)
        (source_out, source_seconds), (lake_out, lake_seconds) = a.result(), b.result()
    if what:
        log(logger, f"verify: {what}", source_seconds=source_seconds, lake_seconds=lake_seconds)
    return source_out, lake_out


@dataclass
class _Sides:
    """Both sides of one table: the source (snapshot plus overlay) and the lake."""

    reader: SourceReader
    conn: Any
    source: SourceTable
    table: lake.LakeTable
    overlay: Overlay

    @property
    def exclude(self) -> list[str] | None:
        return self.overlay.touched if self.source.key else None

    def source_summary(self, parent: Bucket, modulus: int) -> Summary:
        base: Summary = {}
        if not self.overlay.truncated:
            base = self.reader.summary(self.source, parent, modulus, self.exclude)
        return self.overlay.add_to(base, parent, modulus)

    def lake_summary(self, parent: Bucket, modulus: int) -> Summary:
        return lake.summary(self.conn, self.table, parent, modulus)

    def source_rows(self, buckets: list[Bucket]) -> list[Row]:
        base: list[Row] = []
        if not self.overlay.truncated:
            base = self.reader.rows(self.source, buckets, self.exclude)
        return self.overlay.apply(base, buckets)

    def lake_rows(self, buckets: list[Bucket]) -> list[Row]:
        return lake.rows(self.conn, self.table, buckets)


def _compare(
    settings: Settings, cut: Cut, name: Name, table: lake.LakeTable, result: TableResult
) -> None:
    reader = SourceReader(settings.source_url, cut.anchor)
    conn = lake.connect(settings)
    try:
        found = reader.columns(*name)
        if found is None:
            result.problem = "the source has no such table"
            return
        plain, _generated, partitioned = found
        streamed = cut.columns(name)
        if streamed is not None and sorted(streamed) != sorted(plain):
            result.problem = "its columns changed in the source while verify ran"
            result.unproven = True
            return
        if sorted(plain) != sorted(table.columns):
            missing = [c for c in plain if c not in table.columns]
            extra = [c for c in table.columns if c not in plain]
            result.problem = (
                f"columns differ: only in the source {missing or 'none'}, only in the lake "
                f"{extra or 'none'}"
            )
            return
        src = SourceTable(name[0], name[1], table.columns, table.key, partitioned)
        overlay = Overlay.build(table.columns, table.key, cut.changes.get(name, []))
        if overlay.needs_base:
            digests = [
                hashing.key_digest(hashing.row_form([_b(v) for v in k]))
                for k in set(overlay.needs_base.values())
            ]
            base = {r.key: r.text for r in reader.by_digest(src, digests)}
            if overlay.fill(base):
                result.problem = "an unchanged TOAST value could not be found in the source"
                result.unproven = True
                return
        sides = _Sides(reader, conn, src, table, overlay)
        leaves = _differing_buckets(sides, reader.estimate(src), result)
        source_rows, lake_rows = _both(
            lambda: sides.source_rows(leaves), lambda: sides.lake_rows(leaves)
        )
        compare = hashing.compare_keyed if table.key else hashing.compare_multiset
        result.differences = compare(source_rows, lake_rows)
    finally:
        reader.close()
        conn.close()


def _b(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _differing_buckets(sides: _Sides, estimate: int, result: TableResult) -> list[Bucket]:
    """The buckets, small enough to read row by row, whose hash sums differ."""
    leaves: list[Bucket] = []
    parents: list[tuple[Bucket, int]] = [((), hashing.first_level(estimate))]
    total: int | None = None
    while parents and len(leaves) < MAX_READ_BUCKETS:
        parent, modulus = parents.pop(0)
        s, lk = _both(
            lambda p=parent, m=modulus: sides.source_summary(p, m),  # type: ignore[misc]
            lambda p=parent, m=modulus: sides.lake_summary(p, m),  # type: ignore[misc]
            f"hash sums, level {len(parent)}",
        )
        if total is None:
            total = sum(n for n, _ in s.values())
        read, split = hashing.plan(parent, modulus, hashing.differing(s, lk), s, lk)
        leaves.extend(read)
        for bucket in split:
            rows = max(s.get(bucket[-1][2], (0, 0))[0], lk.get(bucket[-1][2], (0, 0))[0])
            parents.append((bucket, hashing.first_level(rows)))
    result.rows = total or 0
    if len(leaves) > MAX_READ_BUCKETS or parents:
        result.more = True
    return leaves[:MAX_READ_BUCKETS]
