"""The interval trigger waits while the stream is behind (old commits), and not otherwise.

The pipeline runs against in-memory fakes of its I/O parts; each batch of the fake stream
holds one transaction and takes longer than the flush interval (but less than the
stretched one) to arrive.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from streambed import pipeline as pipeline_module
from streambed.buffer.changes import TableDelta, TableKey
from streambed.core.config import Settings
from streambed.pgoutput.encoder import encode
from streambed.pgoutput.messages import Begin, Commit, Insert, Message, Relation, RelationColumn
from streambed.pipeline import Pipeline
from streambed.ports import Source, Stream
from streambed.source.stream import Batch, pg_now
from streambed.state.store import Watermark

RELATION = Relation(
    16385, "public", "t", "d", (RelationColumn(1, "id", 20, -1), RelationColumn(0, "v", 25, -1))
)
BATCH_SECONDS = 0.03


class FakeStream:
    """`count` one-row transactions, one per batch, committed `age_seconds` before they
    are read; then nothing."""

    def __init__(self, count: int, age_seconds: float) -> None:
        self.count = count
        self.age_seconds = age_seconds
        self.sent = -1  # the first batch is the Relation message
        self.acked = 0

    def read_batch(self, timeout: float, limit: int = 4096) -> Batch:
        time.sleep(BATCH_SECONDS)
        if self.sent < 0:
            self.sent = 0
            return Batch([encode(RELATION, in_stream=False)], 0)
        if self.sent == self.count:
            return Batch([], 0)
        self.sent += 1
        lsn = 0x1000 * self.sent
        commit_ts = pg_now() - int(self.age_seconds * 1_000_000)
        messages: list[Message] = [
            Begin(lsn, commit_ts, 700 + self.sent),
            Insert(16385, (str(self.sent).encode(), b"v")),
            Commit(0, lsn, lsn + 8, commit_ts),
        ]
        return Batch([encode(msg, in_stream=False) for msg in messages], 0)

    def ack(self, lsn: int) -> None:
        self.acked = lsn

    def send_status(self, force: bool = False) -> object:
        return None

    def close(self) -> None:
        pass


class FakeSource:
    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream

    def prepare(self) -> None:
        pass

    def table_key(self, relation: Relation) -> TableKey:
        return TableKey((0,))

    def open_stream(self) -> FakeStream:
        return self.stream

    def beat(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass


class FakeSink:
    def __init__(self) -> None:
        self.flushed: list[int] = []

    def stage(self, delta: TableDelta) -> None:
        raise AssertionError("no transaction here is large enough to be staged")

    def apply(self, delta: TableDelta) -> str:
        self.flushed.append(len(delta.rows))
        return "metadata.json"

    def frontier(self, schema: str, table: str) -> int | None:
        return None

    def metadata_locations(self) -> Mapping[tuple[str, str], str]:
        return {("public", "t"): "metadata.json"}


class FakeState:
    def set_frontier(self, schema: str, name: str, lsn: int, metadata_location: str) -> None:
        pass

    def record_watermark(self, lsn: int, tables: Mapping[str, str]) -> None:
        pass

    def latest_watermark(self) -> Watermark | None:
        return None

    def register(self, schema: str, name: str, relation_id: int, status: str) -> object:
        return None


class FakeCopier:
    """No copies, but always due: like the resync poll of `CopyManager`, every time."""

    def start(self, source: Source) -> None:
        pass

    def hold(self, stream: Stream) -> Stream:
        return stream

    def blocked(self, schema: str, name: str) -> bool:
        return False

    def relation(self, rel: Relation, key: TableKey) -> None:
        pass

    def due(self, now: float) -> bool:
        return True

    def step(self) -> bool:
        return False

    def stopping(self) -> None:
        pass


def test_copier_polls_do_not_force_flushes_while_catching_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline_module, "CATCH_UP_INTERVAL_FACTOR", 1000)
    settings = Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": "postgresql://localhost/db",
            "STREAMBED_DATA_DIR": str(tmp_path),
            "STREAMBED_FLUSH_INTERVAL": "0.01",
        }
    )
    stream = FakeStream(5, 3600.0)
    sink = FakeSink()
    pipeline = Pipeline(settings, FakeSource(stream), sink, FakeState(), copier=FakeCopier())
    pipeline.run(until=lambda: pipeline.stats.rows >= 5)
    assert sink.flushed == [5]


@pytest.mark.parametrize(
    ("age_seconds", "expected_flushes"),
    [
        (0.0, 3),  # live: the interval fires every second batch (its clock starts dirty)
        (5.0, 3),  # a few seconds behind (merges take that long): still live
        (3600.0, 1),  # behind: one flush, once the stream has nothing more to send
    ],
)
def test_interval_waits_while_catching_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, age_seconds: float, expected_flushes: int
) -> None:
    monkeypatch.setattr(pipeline_module, "CATCH_UP_INTERVAL_FACTOR", 1000)  # 10 s: no race
    settings = Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": "postgresql://localhost/db",
            "STREAMBED_DATA_DIR": str(tmp_path),
            "STREAMBED_FLUSH_INTERVAL": "0.01",
        }
    )
    stream = FakeStream(5, age_seconds)
    sink = FakeSink()
    pipeline = Pipeline(settings, FakeSource(stream), sink, FakeState())
    pipeline.run(until=lambda: pipeline.stats.rows >= 5)
    assert sum(sink.flushed) == 5
    assert len(sink.flushed) == expected_flushes
    assert stream.acked == 0x5000 + 8  # every commit acknowledged once durable
