"""How many ranges a copy is cut into follows the tasks Spark runs at once, and the threads
that copy a table in streambed's process follow a local Spark master's cores."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, cast

import pytest

from streambed.copy import here
from streambed.copy.here import RANGE_THREADS_MAX, range_threads
from streambed.copy.job import task_slots


def _spark(master: str, parallelism: int = 4) -> Any:
    return cast(
        Any,
        SimpleNamespace(
            sparkContext=SimpleNamespace(master=master, defaultParallelism=parallelism)
        ),
    )


@pytest.mark.parametrize(
    ("master", "slots"),
    [
        ("local", 1),
        ("local[2]", 2),
        ("local[3,2]", 3),
        ("local[*]", len(os.sched_getaffinity(0))),  # the cores this process may use
        ("spark://host:7077", 12),
        ("local-cluster[2,1,1024]", 12),
    ],
)
def test_task_slots(master: str, slots: int) -> None:
    assert task_slots(_spark(master, 12)) == slots


@pytest.mark.parametrize(
    ("master", "cores", "threads"),
    [
        ("local[*]", 2, 2),
        ("local[*]", 16, RANGE_THREADS_MAX),
        ("local", 8, 1),  # Spark kept to one core: the copies here too
        ("local[1]", 8, 1),
        ("local[3,2]", 8, 3),
        ("local[3]", 2, 2),  # no more threads than cores
        ("spark://host:7077", 16, RANGE_THREADS_MAX),  # a cluster's: this machine's cores
        ("sc://host:15002", 1, 1),
    ],
)
def test_threads_that_copy_here(
    monkeypatch: pytest.MonkeyPatch, master: str, cores: int, threads: int
) -> None:
    monkeypatch.setattr(here, "cores", lambda: cores)
    assert range_threads(master) == threads
