"""Copy progress: worker connections' names parsed into per-partition counts; rate and ETA."""

from __future__ import annotations

from streambed.copy.progress import TableProgress, parse_progress


def test_parse_progress_keeps_only_copy_workers() -> None:
    rows = [
        ("streambed-copy abc/0", 100),
        ("streambed-copy abc/12", 5),
        ("streambed-copy def/1", None),
        ("streambed-copy-progress", 7),
        ("streambed-copy abc/x", 9),
        ("psql", 3),
        (None, 4),
    ]
    assert parse_progress(rows) == {"abc": {0: 100, 12: 5}, "def": {1: 0}}


def test_rate_and_eta() -> None:
    t = TableProgress("public.t", "abc", estimated_rows=1000, started=0.0)
    t.parts = {0: 200, 1: 300}
    assert t.rows == 500
    assert t.rate(10.0) == 50.0
    assert t.eta(10.0) == 10.0
    assert "copying" in t.line(10.0) and "eta 10s" in t.line(10.0)
    t.finished, t.final_rows = 20.0, 1000
    assert t.rows == 1000 and t.eta(30.0) == 0.0 and t.rate(30.0) == 50.0


def test_no_estimate_means_no_eta() -> None:
    t = TableProgress("public.t", "abc", estimated_rows=0, started=0.0)
    t.parts = {0: 10}
    assert t.eta(1.0) is None and "eta -" in t.line(1.0)
