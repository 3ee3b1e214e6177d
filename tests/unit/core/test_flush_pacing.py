"""The interval trigger is paced by what flushes cost (`streambed.buffer.pacing`).

The pure rule, then the pipeline against the in-memory fakes of
`test_pipeline_catch_up`: a sink whose flushes take longer than the setting.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streambed import pipeline as pipeline_module
from streambed.buffer.changes import TableDelta
from streambed.buffer.pacing import CATCH_UP_CYCLES, PACE, WINDOW, FlushPacer
from streambed.core.config import Settings
from streambed.pipeline import Pipeline
from tests.unit.core.test_pipeline_catch_up import (
    FakeCopier,
    FakeSink,
    FakeSource,
    FakeState,
    FakeStream,
)


def test_the_setting_until_flushes_cost_more() -> None:
    pacer = FlushPacer(2.0)
    assert pacer.interval(False, 30) == 2.0
    assert pacer.cost == 0.0
    pacer.record(0.5)
    pacer.record(1.5)
    assert pacer.cost == 1.0
    assert pacer.interval(False, 30) == 2.0  # cheap flushes: the setting


def test_paced_by_the_median_of_recent_flushes() -> None:
    pacer = FlushPacer(2.0)
    for seconds in (3.0, 5.0):
        pacer.record(seconds)
    assert pacer.interval(False, 30) == pytest.approx(PACE * 4.0)
    pacer.record(30.0)  # one slow flush (a first merge, contention) does not set the pace
    assert pacer.interval(False, 30) == pytest.approx(PACE * 5.0)
    for _ in range(WINDOW):  # the slow flushes are forgotten after WINDOW cheap ones
        pacer.record(0.1)
    assert pacer.interval(False, 30) == 2.0
    pacer.record(-1.0)  # a clock step never gives a negative cost
    assert pacer.cost >= 0.0


def test_behind_only_past_a_few_paced_cycles() -> None:
    pacer = FlushPacer(2.0)
    assert pacer.behind_after(30.0) == 30.0  # cheap flushes: the pipeline's threshold
    for _ in range(3):
        pacer.record(10.0)  # slow merges: a cycle is 10 s waiting plus a 10 s flush
    assert pacer.behind_after(30.0) == pytest.approx(CATCH_UP_CYCLES * (PACE * 10.0 + 10.0))
    # a long setting: its own cycles are normal lag, not a backlog
    assert FlushPacer(60.0).behind_after(30.0) == CATCH_UP_CYCLES * 60.0


def test_behind_stretches_the_setting_or_keeps_a_longer_paced_interval() -> None:
    pacer = FlushPacer(2.0)
    pacer.record(3.0)
    assert pacer.interval(True, 30) == 60.0
    assert pacer.interval(True, 1) == pytest.approx(PACE * 3.0)


class SlowSink(FakeSink):
    """Every flush takes `seconds` (a merge that rewrites a table)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def apply(self, delta: TableDelta) -> str:
        time.sleep(self.seconds)
        return super().apply(delta)


@pytest.mark.parametrize("copier", [False, True], ids=["no copier", "copier always due"])
def test_expensive_flushes_wait_longer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copier: bool
) -> None:
    """Flushes of 0.15 s on a 0.01 s interval, one transaction per 0.03 s batch: without
    pacing every batch or second batch is flushed (and a copier poll forces a flush after
    every batch); paced, each flush waits about 0.15 s of batches."""
    monkeypatch.setattr(pipeline_module, "CATCH_UP_INTERVAL_FACTOR", 1000)
    settings = Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": "postgresql://localhost/db",
            "STREAMBED_DATA_DIR": str(tmp_path),
            "STREAMBED_FLUSH_INTERVAL": "0.01",
        }
    )
    count = 24
    stream = FakeStream(count, 0.0)
    sink = SlowSink(0.15)
    pipeline = Pipeline(
        settings,
        FakeSource(stream),
        sink,
        FakeState(),
        copier=FakeCopier() if copier else None,
    )
    pipeline.run(until=lambda: pipeline.stats.rows >= count)
    assert sum(sink.flushed) == count
    # the first flush is unpaced (nothing measured yet); then about 5 batches a flush
    assert 2 <= len(sink.flushed) <= 8, sink.flushed
    assert max(sink.flushed) >= 3
    assert stream.acked == 0x1000 * count + 8  # every commit acknowledged once durable
