"""Python's cycle collector in Spark's Python workers: `settle()` at the start of a task.

pyspark's daemon runs a full `gc.collect()` in a reused worker after every task. A
streambed worker holds pyspark's, pyarrow's, DuckDB's and streambed's modules, and that
collection visits every object of them each time, a large share of a short task's CPU,
and a worker runs its next task only when it is done.

`settle()` freezes the objects the worker holds when a task starts (`gc.freeze`: the
collector leaves them alone from then on), so the collection after the task visits only
what that task made. What a task starts with is what the daemon's collection after the
previous task kept, plus the task's function and its arguments. An object frozen while
alive that is later dropped inside a reference cycle is not freed while frozen, so every
`FULL_EVERY` tasks a worker unfreezes everything instead, and the collection after that
task is a full one again.
"""

from __future__ import annotations

import gc
import os
from typing import Final

FULL_EVERY: Final = 200
"""Every this many tasks, a worker's collection after a task visits every object again."""
ENV_OFF: Final = "STREAMBED_WORKER_GC_FULL"
"""Set (to anything) in a worker's environment: leave pyspark's full collections alone (for
measuring what `settle` saves)."""

_tasks = 0


def settle() -> None:
    """Call at the start of a task in a Spark Python worker (a copy range, a merge's read
    or write): freeze what the worker holds, or every `FULL_EVERY` tasks unfreeze it."""
    global _tasks
    if os.environ.get(ENV_OFF):
        return
    _tasks += 1
    if _tasks % FULL_EVERY == 0:
        gc.unfreeze()
    else:
        gc.freeze()
