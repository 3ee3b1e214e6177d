"""Copy progress: worker connections' names parsed into per-partition counts; rate and ETA."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.copy.progress import RATE_WINDOW, TableProgress, parse_progress


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


def test_a_table_is_starting_until_rows_flow_and_the_wait_is_not_in_its_rate() -> None:
    t = TableProgress("public.t", "abc", estimated_rows=10_000, started=0.0)
    for second in range(1, 9):  # Spark starting and planning: no rows counted
        t.observe(float(second))
    assert "starting" in t.line(8.5) and "eta -" in t.line(8.5)
    t.parts = {0: 400, 1: 600}
    t.observe(9.0)
    assert "copying" in t.line(9.0)
    assert t.rate(9.0) == 1000.0  # since the last poll that counted none, not since 0
    assert t.eta(9.0) == 9.0
    t.finished, t.final_rows = 11.0, 3000
    assert t.rate(12.0) == 1000.0 and "done" in t.line(12.0)


def test_the_rate_follows_the_last_window_of_samples() -> None:
    t = TableProgress("public.t", "abc", estimated_rows=0, started=0.0)
    rows = 0
    for second in range(1, 31):
        rows += 100 if second <= 20 else 1000  # slower while another table shared the cores
        t.parts = {0: rows}
        t.observe(float(second))
    assert t.rate(30.0) == 1000.0
    assert t.samples[0][0] == 30.0 - RATE_WINDOW


@given(
    rate=st.integers(1000, 1_000_000),
    flow=st.floats(0.0, 30.0),
    gaps=st.lists(st.floats(0.05, 5.0), min_size=1, max_size=60),
)
def test_a_steady_flow_is_never_overstated_and_is_exact_after_a_window(
    rate: int, flow: float, gaps: list[float]
) -> None:
    t = TableProgress("public.t", "abc", estimated_rows=0, started=0.0)
    now = 0.0
    for gap in gaps:
        now += gap
        t.parts = {0: int(rate * max(0.0, now - flow))}
        t.observe(now)
        if not t.samples:
            continue
        assert t.rate(now) <= rate * 1.001
        if t.samples[0][0] <= t.samples[-1][0] - RATE_WINDOW:
            assert abs(t.rate(now) - rate) <= rate * 0.001


def test_a_copy_between_two_polls_is_rated_by_its_tasks_time() -> None:
    t = TableProgress("public.t", "abc", estimated_rows=1_000_000, started=0.0)
    for second in range(1, 10):  # the tasks ran between the last two polls, unseen
        t.observe(float(second))
    t.finished, t.final_rows, t.copying = 9.05, 1_000_000, 0.5
    assert t.rate(9.05) == 2_000_000.0  # not 1M rows in the 0.05 s since the last poll
    t.copying = None
    assert t.rate(9.05) == pytest.approx(1_000_000 / 0.05)  # what the polls alone would say
