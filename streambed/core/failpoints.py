"""Named failpoints for crash tests.

`STREAMBED_FAILPOINTS=after_parquet_write,after_commit_before_state` makes the process
kill itself with SIGKILL the first time it reaches each named point. A name may carry a
count, `after_commit_before_state:3`, to fire on the third time instead.

Some points do something instead of killing the process (`reached` tells the code when):
`copy_leftover_file` plants a file in a copy's run directory as a failed task attempt
leaves it, `expire_copy_snapshot` ends the transaction that holds a copy's snapshot before
its tasks import it, `kill_start_snapshot` terminates the session holding the first
start's snapshot before its copy begins, `copy_taken_storage_error` makes the loop fail to
load the lake tables of finished copies (a storage error) when it takes them,
`slow_copy_job` makes a Spark copy wait 5 s after its last check for a stop and before it
submits its job. They fire on
their count, or on each hit of a range (`expire_copy_snapshot:2-4`: the second, third and
fourth time).
"""

from __future__ import annotations

import os
import signal
import threading

KNOWN = frozenset(
    {
        "after_parquet_write",
        "after_delete_files_write",
        "after_commit_before_state",
        "after_state_before_ack",
        "after_table_commit",
        "during_copy",
        "after_copy_commit",
        "after_slot_created",
        "copy_leftover_file",
        "expire_copy_snapshot",
        "kill_start_snapshot",
        "copy_taken_storage_error",
        "slow_copy_job",
    }
)

_hits: dict[str, int] = {}
_lock = threading.Lock()  # copies reach points from several threads


def _armed() -> dict[str, tuple[int, int]]:
    """name → the first and last hit it fires on."""
    armed: dict[str, tuple[int, int]] = {}
    for item in os.environ.get("STREAMBED_FAILPOINTS", "").split(","):
        name, _, count = item.strip().partition(":")
        first, _, last = count.partition("-")
        if name:
            start = int(first) if first.isdigit() else 1
            armed[name] = (start, max(start, int(last)) if last.isdigit() else start)
    return armed


def unknown_names() -> list[str]:
    return sorted(set(_armed()) - KNOWN)


def failpoint(name: str) -> None:
    """Kill this process with SIGKILL if `name` is armed and reached its count."""
    want = _armed().get(name)
    if want is None:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= want[0]:
        os.kill(os.getpid(), signal.SIGKILL)


def reached(name: str) -> bool:
    """True when `name` is armed and this hit is its count (or within its range)."""
    want = _armed().get(name)
    if want is None:
        return False
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        return want[0] <= _hits[name] <= want[1]
