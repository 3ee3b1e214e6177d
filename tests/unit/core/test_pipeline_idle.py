"""An idle loop waits on the socket; a loop with buffered changes waits until they are due.

The fake stream records the timeout of every `read_batch` and answers at once, so a loop
that polled with a zero timeout (it did once the flush interval since the last flush had
passed: an idle `streambed run` spun a core) shows as zeros.
"""

from __future__ import annotations

import time
from pathlib import Path

from streambed.core.config import Settings
from streambed.pgoutput.encoder import encode
from streambed.pgoutput.messages import LogicalMessage
from streambed.pipeline import LOOP_WAIT, Pipeline
from streambed.source.heartbeat import HEARTBEAT_PREFIX
from streambed.source.stream import Batch
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


class Heartbeat(OneRowTransactions):
    """A keepalive, a heartbeat read with a keepalive from before it, then a keepalive past
    it; every status update and whether it was forced is kept."""

    def __init__(self) -> None:
        super().__init__(0, 0.0)
        self.batches = [
            Batch([encode(RELATION, in_stream=False)], 0),
            Batch([], 0x100),
            Batch(
                [encode(LogicalMessage(0, 0x200, HEARTBEAT_PREFIX, b""), in_stream=False)], 0x180
            ),
            Batch([], 0x300),
        ]
        self.statuses: list[tuple[int, bool]] = []
        self.before_end: list[tuple[int, bool]] | None = None  # sent while still streaming

    def read_batch(self, timeout: float, limit: int = 4096) -> Batch:
        if self.batches:
            return self.batches.pop(0)
        self.before_end = list(self.statuses)
        return Batch([], 0)

    def send_status(self, force: bool = False) -> object:
        self.statuses.append((self.acked, force))
        return None


def test_an_idle_ack_past_a_heartbeat_is_reported_at_once(tmp_path: Path) -> None:
    """`streambed verify` writes a heartbeat and waits for the slot to move past it."""
    stream = Heartbeat()
    pipeline = Pipeline(settings(tmp_path, 1.0), FakeSource(stream), FakeSink(), FakeState())
    pipeline.run(until=lambda: stream.before_end is not None)
    assert stream.before_end is not None
    assert [s for s in stream.before_end if s[1]] == [(0x300, True)], stream.statuses
