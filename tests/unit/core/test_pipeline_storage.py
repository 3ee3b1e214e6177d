"""A storage failure during a flush: the pipeline drops what it buffered, lets the lake side
recover, and reads again from the slot's confirmed position; nothing is acknowledged before
it is in the lake, and nothing is applied twice.

The fakes model a slot: each stream opened sends every transaction after the position last
acknowledged; the sink fails its first `failures` applies with a StorageError.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streambed.buffer.changes import TableDelta, TableKey
from streambed.core.config import Settings
from streambed.core.errors import Kind, StorageError, StreambedError
from streambed.core.retry import RetryPolicy
from streambed.pgoutput.encoder import encode
from streambed.pgoutput.messages import Begin, Commit, Insert, Message, Relation, RelationColumn
from streambed.pipeline import Pipeline
from streambed.source.stream import Batch, pg_now
from tests.unit.core.test_pipeline_catch_up import FakeState

RELATION = Relation(
    16385, "public", "t", "d", (RelationColumn(1, "id", 20, -1), RelationColumn(0, "v", 25, -1))
)


def lsn_of(n: int) -> int:
    return 0x1000 * n


class SlotStream:
    """Transactions 1..count after `start`, one per batch, then nothing."""

    def __init__(self, slot: FakeSlot, start: int) -> None:
        self.slot = slot
        self.next = start + 1
        self.relation_sent = False

    def read_batch(self, timeout: float, limit: int = 4096) -> Batch:
        if not self.relation_sent:
            self.relation_sent = True
            return Batch([encode(RELATION, in_stream=False)], 0)
        if self.next > self.slot.count:
            return Batch([], 0)
        n, self.next = self.next, self.next + 1
        lsn = lsn_of(n)
        messages: list[Message] = [
            Begin(lsn, pg_now(), 700 + n),
            Insert(16385, (str(n).encode(), b"v")),
            Commit(0, lsn, lsn + 8, pg_now()),
        ]
        return Batch([encode(msg, in_stream=False) for msg in messages], 0)

    def ack(self, lsn: int) -> None:
        assert lsn <= self.slot.durable + 8, "acknowledged a change not in the lake"
        self.slot.acked = max(self.slot.acked, lsn)

    def send_status(self, force: bool = False) -> object:
        return None

    def close(self) -> None:
        pass


class FakeSlot:
    """The source: `count` transactions; streams start after the last acknowledged one."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.acked = 0
        self.durable = 0  # the highest commit LSN the sink committed
        self.opened = 0

    def prepare(self) -> None:
        pass

    def table_key(self, relation: Relation) -> TableKey:
        return TableKey((0,))

    def open_stream(self) -> SlotStream:
        self.opened += 1
        return SlotStream(self, self.acked // 0x1000)

    def beat(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass


class FailingSink:
    """Commits deltas (rows by commit LSN); fails the first `failures` applies."""

    def __init__(self, slot: FakeSlot, failures: int, kind: Kind = Kind.STORAGE) -> None:
        self.slot = slot
        self.failures = failures
        self.kind = kind
        self.committed: dict[int, int] = {}  # commit LSN -> rows
        self.frontier_lsn: int | None = None
        self.recovered = 0

    def stage(self, delta: TableDelta) -> None:
        raise AssertionError("no transaction here is large enough to be staged")

    def apply(self, delta: TableDelta) -> str:
        if self.failures:
            self.failures -= 1
            raise StreambedError("the object store is down", kind=self.kind)
        assert delta.commit_lsn not in self.committed
        self.committed[delta.commit_lsn] = len(delta.rows)
        self.frontier_lsn = delta.commit_lsn
        self.slot.durable = delta.commit_lsn
        return "metadata.json"

    def frontier(self, schema: str, table: str) -> int | None:
        return self.frontier_lsn

    def metadata_locations(self) -> Mapping[tuple[str, str], str]:
        return {("public", "t"): "metadata.json"}

    def recover(self) -> None:
        self.recovered += 1


def pipeline_for(tmp_path: Path, slot: FakeSlot, sink: FailingSink) -> Pipeline:
    config = Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": "postgresql://localhost/db",
            "STREAMBED_DATA_DIR": str(tmp_path),
            "STREAMBED_FLUSH_INTERVAL": "0.001",
        }
    )
    return Pipeline(
        config, slot, sink, FakeState(), recover=sink.recover, retry=RetryPolicy.immediate()
    )


@settings(max_examples=25, deadline=None)
@given(count=st.integers(1, 8), failures=st.integers(0, 5))
def test_storage_failures_lose_and_double_nothing(
    tmp_path_factory: pytest.TempPathFactory, count: int, failures: int
) -> None:
    slot = FakeSlot(count)
    sink = FailingSink(slot, failures)
    pipeline = pipeline_for(tmp_path_factory.mktemp("p"), slot, sink)
    deadline = time.monotonic() + 60  # a pipeline that never gets there fails, not hangs
    pipeline.run(until=lambda: slot.acked == lsn_of(count) + 8 or time.monotonic() > deadline)
    # Every transaction is in the lake exactly once, and all of them were acknowledged.
    assert sum(sink.committed.values()) == count
    assert slot.acked == lsn_of(count) + 8
    # Each failure read the slot again, after the lake side recovered.
    assert sink.recovered == failures
    assert slot.opened == failures + 1


@pytest.mark.parametrize("kind", [Kind.INTERNAL, Kind.STORAGE_AUTH])
def test_other_errors_still_stop(tmp_path: Path, kind: Kind) -> None:
    """A bug stops the process, and so does a store that refuses the credentials or the
    access (`Kind.STORAGE_AUTH`): waiting cannot fix it."""
    slot = FakeSlot(3)
    sink = FailingSink(slot, 1, kind=kind)
    pipeline = pipeline_for(tmp_path, slot, sink)
    with pytest.raises(StreambedError, match="object store is down") as raised:
        pipeline.run(until=lambda: slot.acked > 0)
    assert raised.value.kind is kind
    assert slot.acked == 0
    assert sink.recovered == 0


def test_a_stop_during_an_outage_returns(tmp_path: Path) -> None:
    """Stopping while storage fails ends the loop; what was not flushed stays in the slot."""
    slot = FakeSlot(2)
    sink = FailingSink(slot, 10**6)
    pipeline = pipeline_for(tmp_path, slot, sink)

    def until() -> bool:
        if slot.opened >= 3:  # failed twice: stop during the outage
            pipeline.stop()
        return False

    pipeline.run(until=until)
    assert slot.acked == 0
    assert sink.committed == {}
    assert slot.opened == 3


def test_storage_error_kind() -> None:
    assert StorageError("x").kind is Kind.STORAGE
