"""What the components report becomes the samples of docs/metrics.md."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry

from streambed.lake.sink import TableStats
from streambed.metrics.replication import ReplicationMetrics
from streambed.source.setup import SlotHealth

S = 1_000_000


def metrics(now: list[int]) -> tuple[ReplicationMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return ReplicationMetrics(registry, now_ts=lambda: now[0]), registry


def test_flushes_count_changes_by_table_and_operation_and_set_the_lag() -> None:
    now = [100 * S]
    m, r = metrics(now)
    m.commit_read(90 * S, buffered=True)
    m.flushed(0.2, {("shop", "items"): {"insert": 3, "delete": 1}})
    labels = {"schema": "shop", "table": "items", "operation": "insert"}
    assert r.get_sample_value("streambed_changes_applied_total", labels) == 3
    assert r.get_sample_value("streambed_flush_duration_seconds_count") == 1
    assert r.get_sample_value("streambed_replication_lag_seconds") == 10.0
    m.idle()
    assert r.get_sample_value("streambed_replication_lag_seconds") == 0.0


def test_tables_are_reported_and_forgotten() -> None:
    m, r = metrics([0])
    m.table(TableStats("shop", "items", rows=5, files=2, bytes=900, frontier_lsn=0x16B3748))
    labels = {"schema": "shop", "table": "items"}
    assert r.get_sample_value("streambed_table_rows", labels) == 5
    assert r.get_sample_value("streambed_table_frontier_lsn", labels) == 0x16B3748
    m.forget("shop", "items")
    assert r.get_sample_value("streambed_table_rows", labels) is None
    m.forget("shop", "items")  # twice: nothing to remove, no error


def test_the_slot_is_nan_until_read_and_when_gone() -> None:
    m, r = metrics([0])
    assert math.isnan(r.get_sample_value("streambed_slot_retained_wal_bytes") or 0.0)
    m.slot(SlotHealth(True, "reserved", 10, 4096, None))
    assert r.get_sample_value("streambed_slot_retained_wal_bytes") == 4096
    assert math.isnan(r.get_sample_value("streambed_slot_safe_wal_bytes") or 0.0)
    m.slot(None)
    assert math.isnan(r.get_sample_value("streambed_slot_active") or 0.0)


def test_streaming_and_copies() -> None:
    m, r = metrics([0])
    assert r.get_sample_value("streambed_streaming") == 0.0  # starting
    m.streaming(None)
    assert r.get_sample_value("streambed_streaming") == 1.0
    m.copy_progress('shop."odd.name"', 40, 100, True)
    labels = {"schema": "shop", "table": "odd.name"}
    assert r.get_sample_value("streambed_copy_rows", labels) == 40
    assert r.get_sample_value("streambed_copy_running", labels) == 1.0
