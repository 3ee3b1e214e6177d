"""A table copied in streambed's process (`streambed.copy.here`): how it is split into
ranges (pure), and how its ranges' threads end when one fails (the range reader replaced
by one that only waits or fails, so the coordination is tested without a source)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.buffer.changes import TableKey
from streambed.copy import here
from streambed.copy.catalog import TableInfo
from streambed.copy.here import RANGE_MIN_BYTES, copy_here, here_ranges
from streambed.copy.ranges import BLOCKS_PER_PARTITION, BlockRange
from streambed.copy.task import RangeStopped, Stop, Written
from streambed.pgoutput.messages import Relation, RelationColumn

MIB = 1024 * 1024


def _info(blocks: int, toast_bytes: int = 0) -> TableInfo:
    relation = Relation(1, "public", "t", "d", (RelationColumn(1, "id", 23, -1),))
    return TableInfo(relation, TableKey((0,)), blocks, blocks * 100, toast_bytes=toast_bytes)


@pytest.mark.parametrize(
    ("blocks", "toast_bytes", "threads", "count"),
    [
        (1, 0, 2, 1),  # one block: one range
        (255, 0, 2, 1),  # under 2 MiB a range
        (512, 0, 2, 2),  # 4 MiB: two ranges of 2 MiB
        (512, 0, 4, 2),
        (16384, 0, 4, 4),  # 128 MiB, four threads: one range each
        (16384, 0, 1, 1),
        (10, 4 * MIB, 2, 2),  # a small heap whose values are stored out of line
    ],
)
def test_ranges_one_a_thread_of_at_least_2_mib(
    blocks: int, toast_bytes: int, threads: int, count: int
) -> None:
    assert len(here_ranges(_info(blocks, toast_bytes), threads)) == count


@given(st.integers(1, 2**20), st.integers(0, 2**34), st.integers(1, 8))
def test_ranges_tile_the_table(blocks: int, toast_bytes: int, threads: int) -> None:
    info = _info(blocks, toast_bytes)
    ranges = here_ranges(info, threads)
    assert ranges[0].start == 0 and ranges[-1].end is None
    assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
    sizes = [(blocks if r.end is None else r.end) - r.start for r in ranges]
    assert min(sizes) >= 1 and max(sizes) <= BLOCKS_PER_PARTITION  # at most 1 GiB each
    if len(ranges) > threads:  # more ranges than threads only for a table over 1 GiB
        assert blocks > BLOCKS_PER_PARTITION
    elif len(ranges) > 1:
        assert info.stored_bytes // len(ranges) >= RANGE_MIN_BYTES


Body = Callable[[int, Stop], Iterator[Written]]
"""A stand-in range reader: (range index, the copy's stop) → the range's files."""


def _use(monkeypatch: pytest.MonkeyPatch, body: Body) -> None:
    """Read every range with `body` instead of `task.copy_range`."""

    def copy_range(*range_: object, stop: Stop | None = None) -> Iterator[Written]:
        index = range_[1]  # (options, index, first block, end block)
        assert isinstance(index, int) and stop is not None
        return body(index, stop)

    monkeypatch.setattr(here, "copy_range", copy_range)


def _waiting(fail: set[int], started: dict[int, threading.Event]) -> tuple[Body, dict[int, str]]:
    """A reader and how each range ended. Every range first waits until all have started.
    Then the ranges in `fail` raise; the others yield a file when none fails, or else wait
    for `stop` and raise `RangeStopped`, as the real reader does at its next batch."""
    ended: dict[int, str] = {}

    def body(index: int, stop: Stop) -> Iterator[Written]:
        started[index].set()
        for event in started.values():
            assert event.wait(10)
        if index in fail:
            ended[index] = "failed"
            raise ValueError(f"range {index} failed")
        if not fail:
            ended[index] = "done"
            yield (f"file-{index}", 1, 10, 0.0, 1.0, None)
            return
        assert _set_within(stop, 10), "never stopped"
        ended[index] = "stopped"
        raise RangeStopped("another range of the table failed")

    return body, ended


def _set_within(stop: Stop, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


RANGES = [BlockRange(0, 10), BlockRange(10, None)]


@pytest.fixture(autouse=True)
def two_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Two range threads whatever the machine's cores (the ranges above wait for each
    other)."""
    pool = ThreadPoolExecutor(2)
    monkeypatch.setattr(here, "_range_pool", lambda threads: pool)
    yield
    pool.shutdown()


def test_every_range_writes_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    started = {i: threading.Event() for i in range(len(RANGES))}
    body, ended = _waiting(set(), started)
    _use(monkeypatch, body)
    written = copy_here({}, RANGES, 2)
    assert [w[0] for w in written] == ["file-0", "file-1"]
    assert ended == {0: "done", 1: "done"}


@pytest.mark.parametrize("failing", [0, 1])
def test_a_failed_range_stops_the_others_and_its_error_is_raised_after_they_end(
    monkeypatch: pytest.MonkeyPatch, failing: int
) -> None:
    started = {i: threading.Event() for i in range(len(RANGES))}
    body, ended = _waiting({failing}, started)
    _use(monkeypatch, body)
    with pytest.raises(ValueError, match=f"range {failing} failed"):
        copy_here({}, RANGES, 2)
    assert ended == {failing: "failed", 1 - failing: "stopped"}  # both ended before the raise


def test_a_finished_range_s_files_are_deleted_when_another_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    written = tmp_path / "range-0.parquet"
    first_done = threading.Event()

    def body(index: int, stop: Stop) -> Iterator[Written]:
        if index == 0:
            written.write_bytes(b"rows")
            first_done.set()
            yield (written.as_uri(), 1, 4, 0.0, 1.0, None)
            return
        assert first_done.wait(10)
        raise ValueError("range 1 failed")

    _use(monkeypatch, body)
    with pytest.raises(ValueError, match="range 1 failed"):
        copy_here({}, RANGES, 2)
    assert not written.exists()


def test_ranges_not_started_when_one_fails_never_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """More ranges than threads: a failure in the first wave leaves the rest unread."""
    ran: list[int] = []
    lock = threading.Lock()

    def body(index: int, stop: Stop) -> Iterator[Written]:
        with lock:
            ran.append(index)
        time.sleep(0.05)  # reading, then failing
        if index >= 0:
            raise ValueError(f"range {index} failed")
        yield ("never", 0, 0, 0.0, 0.0, None)  # a generator, as the real reader is

    _use(monkeypatch, body)
    ranges = [BlockRange(i, i + 1) for i in range(40)] + [BlockRange(40, None)]
    with pytest.raises(ValueError, match="failed"):
        copy_here({}, ranges, 2)
    assert len(ran) <= 6, ran  # the first wave and what started before the copy saw it


def test_closing_stops_every_range_and_queued_ranges_never_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """streambed stopping (the caller's `closing`): the running ranges stop at their next
    batch, the queued ones never start, and the copy raises `RangeStopped`."""
    closing = threading.Event()
    ran: list[int] = []
    stopped: list[int] = []
    lock = threading.Lock()

    def body(index: int, stop: Stop) -> Iterator[Written]:
        with lock:
            ran.append(index)
            if len(ran) == 2:
                closing.set()  # both threads are reading
        assert _set_within(stop, 10), "never stopped"
        with lock:
            stopped.append(index)
        if stop.is_set():  # as the real reader does at its next batch
            raise RangeStopped("stopped")
        yield ("never", 0, 0, 0.0, 0.0, None)  # a generator, as the real reader is

    _use(monkeypatch, body)
    ranges = [BlockRange(i, i + 1) for i in range(10)] + [BlockRange(10, None)]
    with pytest.raises(RangeStopped):
        copy_here({}, ranges, 2, closing=closing)
    assert sorted(ran) == sorted(stopped) == [0, 1]
