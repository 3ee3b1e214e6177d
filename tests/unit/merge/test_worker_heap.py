"""`worker_heap.settle`: freezes the worker's objects at a task's start, and every
`FULL_EVERY` tasks unfreezes them so that a full collection runs again."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streambed.spark import worker_heap


@pytest.fixture(autouse=True)
def _unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(worker_heap, "_tasks", 0)
    monkeypatch.delenv(worker_heap.ENV_OFF, raising=False)
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_task_start_freezes_what_the_process_holds() -> None:
    held = [object() for _ in range(10)] + [[i] for i in range(1000)]
    assert gc.get_freeze_count() == 0
    worker_heap.settle()
    assert gc.get_freeze_count() >= len(held)
    assert len(gc.get_objects()) < gc.get_freeze_count() / 10


def test_every_full_every_tasks_the_objects_are_unfrozen() -> None:
    for task in range(1, 2 * worker_heap.FULL_EVERY + 1):
        worker_heap.settle()
        frozen = gc.get_freeze_count()
        if task % worker_heap.FULL_EVERY == 0:
            assert frozen == 0, task
        else:
            assert frozen > 0, task


def test_a_cycle_dropped_while_frozen_is_freed_after_the_full_collection() -> None:
    class Node:
        pass

    node = Node()
    node.self = node  # type: ignore[attr-defined]
    alive = weakref.ref(node)
    worker_heap.settle()
    del node
    gc.collect()
    assert alive() is not None  # frozen: the collection leaves the cycle alone
    for _ in range(worker_heap.FULL_EVERY - 1):
        worker_heap.settle()
    gc.collect()
    assert alive() is None


def test_the_environment_can_leave_the_collections_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(worker_heap.ENV_OFF, "1")
    worker_heap.settle()
    assert gc.get_freeze_count() == 0
