"""A table's copy in streambed's own process: its ctid ranges read side by side by a few
threads, each as a Spark task reads one (`task.copy_range`), for tables of at most
`STREAMBED_COPY_LOCAL_BYTES` (docs/initial-copy.md, "Tables copied here").

The threads are this module's, shared by every copy of the process, so the copies running
at once (the copy manager copies two tables at a time) read at most `range_threads()`
ranges together, and each thread keeps its DuckDB attachment of the source, and so one
connection, from one range to the next (`duck._attach`).

A range that fails stops its table's other ranges at their next batch (`RangeStopped`)
and the files of those that finished are deleted; the copy raises once every range has
ended, so no thread writes a file after the caller starts removing the failed copy's files.
The caller's `closing` event (set when streambed stops) stops every range the same way,
so a stop does not wait for a table's copy to finish.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

from streambed.copy.catalog import TableInfo
from streambed.copy.ranges import BlockRange, block_ranges
from streambed.copy.task import RangeStopped, Written, copy_range
from streambed.spark.data_source import filesystem

RANGE_THREADS_MAX: Final = 4
"""At most this many ranges are read at once in this process, however many cores it has:
each holds a batch and a row group (docs/initial-copy.md, Memory) in streambed's own
memory, and a table larger than the limit goes to Spark, which spreads its ranges over
every core."""

RANGE_MIN_BYTES: Final = 2 * 1024 * 1024
"""A table is split into a range per this much heap and TOAST at most: below it a second
range's connection, snapshot import and file cost more than they save."""

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


LOCAL_MASTER: Final = re.compile(r"local(?:\[(\d+|\*)(?:,\d+)?\])?")
"""Spark's `local`, `local[N]`, `local[*]` and `local[N,F]` masters."""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def local_cores(master: str) -> int | None:
    """The cores a local Spark master runs tasks on (`local`: one); None for a cluster's."""
    found = LOCAL_MASTER.fullmatch(master)
    if found is None:
        return None
    count = found.group(1)
    if count is None:
        return 1
    return cores() if count == "*" else max(1, int(count))


def range_threads(master: str = "local[*]") -> int:
    """The threads that read ranges here: the cores this process may run on, no more than
    a `local[N]` Spark master is given (`STREAMBED_SPARK_MASTER`: a user who keeps Spark to
    N cores keeps the copies here to N too), at most `RANGE_THREADS_MAX`."""
    budget = local_cores(master)
    return max(1, min(RANGE_THREADS_MAX, cores(), budget or RANGE_THREADS_MAX))


def here_ranges(info: TableInfo, threads: int) -> list[BlockRange]:
    """`info`'s ranges when it is copied here: one a thread, fewer for a table of less than
    `RANGE_MIN_BYTES` a thread; ranges of at most 1 GiB (`ranges.block_ranges`)."""
    count = max(1, min(threads, info.stored_bytes // RANGE_MIN_BYTES))
    return block_ranges(info.blocks, slots=count)


def _range_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of `threads` threads (one size in a process: its master's)."""
    with _pools_lock:
        pool = _pools.get(threads)
        if pool is None:
            pool = ThreadPoolExecutor(threads, thread_name_prefix="streambed-range")
            _pools[threads] = pool
        return pool


class _Either:
    """Set when any of its events is: a table's own stop, or the caller's `closing`."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def copy_here(
    options: Mapping[str, str],
    ranges: Sequence[BlockRange],
    threads: int,
    *,
    closing: threading.Event | None = None,
) -> list[Written]:
    """Copy `ranges` (range i is the copy's i-th, as a Spark task numbers its files) on this
    module's `threads` threads; every written file. Raises the first range's error (not a
    range's stop) once every range has ended, after deleting the files of the ranges that
    finished (best effort: the caller removes what is left of the run's files). Once
    `closing` is set, each range stops at its next batch and `RangeStopped` is raised."""
    own = threading.Event()
    stop = _Either(own) if closing is None else _Either(own, closing)
    pool = _range_pool(threads)
    futures: list[Future[list[Written]]] = [
        pool.submit(_copy_range, options, i, r, stop) for i, r in enumerate(ranges)
    ]
    concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
    if any(f.done() and f.exception() is not None for f in futures):
        own.set()
        for f in futures:
            f.cancel()  # not started yet: never starts
    concurrent.futures.wait(futures)
    ended = [f for f in futures if not f.cancelled()]
    errors = [e for f in ended if (e := f.exception()) is not None]
    if not errors:
        return [w for f in futures for w in f.result()]
    _delete([w[0] for f in ended if f.exception() is None for w in f.result()], options)
    error = next((e for e in errors if not isinstance(e, RangeStopped)), errors[0])
    futures.clear()
    ended.clear()
    errors.clear()
    try:
        raise error
    finally:
        del error  # no reference cycle through this frame's locals and the traceback


def _delete(paths: list[str], options: Mapping[str, str]) -> None:
    for uri in paths:
        fs, path = filesystem(uri, options)
        with contextlib.suppress(OSError):
            fs.delete_file(path)


def _copy_range(
    options: Mapping[str, str], index: int, block_range: BlockRange, stop: _Either
) -> list[Written]:
    if stop.is_set():
        raise RangeStopped("the copy was stopped before this range began")
    return list(copy_range(options, index, block_range.start, block_range.end, stop=stop))
