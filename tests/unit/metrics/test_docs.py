"""docs/metrics.md describes every metric streambed exposes, and the Grafana dashboard asks
for none that does not exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from streambed.lake.sink import TableStats
from streambed.metrics.children import ChildMetrics
from streambed.metrics.health import QueryProcess
from streambed.metrics.query import QueryMetrics
from streambed.metrics.replication import ReplicationMetrics

DOCS = Path(__file__).parents[3] / "docs"
NAME = re.compile(r"\bstreambed_[a-z_]+")


class Supervisor:
    pid = None
    restarts = 0


def exposed() -> set[str]:
    """Every sample name of streambed's own metrics (with _total, _bucket, ... suffixes)."""
    registry = CollectorRegistry()
    replication = ReplicationMetrics(registry)
    # labelled metrics have samples once a label set is used
    replication.flushed(0.1, {("shop", "items"): {"insert": 1}})
    replication.written("append", 0.1)
    replication.table(TableStats("shop", "items", rows=1, files=1, bytes=1, frontier_lsn=1))
    replication.copy_progress("shop.items", 1, 1, False)
    query = QueryMetrics(registry)
    query.error("22012")
    children = ChildMetrics(CollectorRegistry())
    try:
        QueryProcess(Supervisor(), children, registry)
        text = generate_latest(registry).decode()
    finally:
        children.close()
    return set(NAME.findall(text))


def test_the_reference_describes_every_metric() -> None:
    documented = set(NAME.findall((DOCS / "metrics.md").read_text()))
    families = {re.sub(r"_(bucket|count|sum|created)$", "", n) for n in exposed()}
    missing = {n for n in families if n not in documented and n + "_total" not in documented}
    assert not missing
    unknown = {n for n in documented if n not in exposed() and n not in families}
    assert not unknown


def test_the_dashboard_asks_only_for_metrics_that_exist() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in NAME.findall(target["expr"])
    }
    assert asked and asked <= exposed(), asked - exposed()
    assert "streambed_replication_lag_seconds" in asked
