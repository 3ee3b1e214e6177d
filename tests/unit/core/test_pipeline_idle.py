"""An idle loop waits on the socket; a loop with buffered changes waits until they are due.

The fake stream records the timeout of every `read_batch` and answers at once, so a loop
that polled with a zero timeout (it did once the flush interval since the last flush had
passed: an idle `streambed run` spun a core) shows as zeros.
"""

from __future__ import annotations

import time
from pathlib import Path

from streambed.config import Settings
from streambed.pgoutput.encoder import encode
from streambed.pipeline import LOOP_WAIT, Pipeline
from streambed.replication.stream import Batch
from tests.unit.core.test_pipeline_catch_up import RELATION, FakeSink, FakeSource, FakeState
from tests.unit.core.test_pipeline_catch_up import FakeStream as OneRowTransactions


class Waits(OneRowTransactions):
    """`count` one-row transactions, then nothing; every timeout asked for is kept."""

    def __init__(self, count: int) -> None:
        super().__init__(count, 0.0)
        self.timeouts: list[float] = []

    def read_batch(self, timeout: float, limit: int = 4096) -> Batch:
        self.timeouts.append(timeout)
        if self.sent < 0:
            self.sent = 0
            return Batch([encode(RELATION, in_stream=False)], 0)
        if self.sent == self.count:
            time.sleep(0.002)  # a real stream would wait up to `timeout` here
            return Batch([], 0)
        return super().read_batch(timeout, limit)


def settings(tmp_path: Path, interval: float) -> Settings:
    return Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": "postgresql://localhost/db",
            "STREAMBED_DATA_DIR": str(tmp_path),
            "STREAMBED_FLUSH_INTERVAL": str(interval),
        }
    )


def test_an_idle_loop_never_polls_with_a_zero_timeout(tmp_path: Path) -> None:
    stream = Waits(0)
    pipeline = Pipeline(settings(tmp_path, 0.01), FakeSource(stream), FakeSink(), FakeState())
    ends = time.monotonic() + 0.2  # 20 flush intervals
    pipeline.run(until=lambda: time.monotonic() > ends)
    assert len(stream.timeouts) > 10
    assert set(stream.timeouts) == {LOOP_WAIT}


def test_buffered_changes_are_waited_for_only_until_due(tmp_path: Path) -> None:
    stream = Waits(1)
    sink = FakeSink()
    pipeline = Pipeline(settings(tmp_path, 0.05), FakeSource(stream), sink, FakeState())
    pipeline.run(until=lambda: pipeline.stats.rows >= 1)
    assert sink.flushed == [1]
    # After the transaction: waits shorter than the interval, until the flush.
    after = stream.timeouts[2:]
    assert after and all(0 <= t <= 0.05 for t in after)
