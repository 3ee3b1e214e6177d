"""How many ranges a copy is cut into follows the tasks Spark runs at once."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, cast

import pytest

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
        ("local[*]", os.cpu_count() or 1),
        ("spark://host:7077", 12),
        ("local-cluster[2,1,1024]", 12),
    ],
)
def test_task_slots(master: str, slots: int) -> None:
    assert task_slots(_spark(master, 12)) == slots
