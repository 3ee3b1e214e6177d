"""CPU seconds of a process tree, read from /proc (Linux), for the benchmarks' accounting.

A process's `utime + stime` is its own CPU; `cutime + cstime` holds that of the children it
has reaped. A tree's CPU is the sum of both over the root and its live descendants, so a
child that exited between two readings still counts once (in its parent's reaped time).
"""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stats() -> dict[int, tuple[int, float]]:
    """pid → (parent pid, CPU seconds of the process and its reaped children)."""
    found: dict[int, tuple[int, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        found[int(stat.parent.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / TICKS)
    return found


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by `root` and every live process under it."""
    stats = _stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


def postmaster_pid(data_dir: Path) -> int:
    """The postmaster of a cluster, from its `postmaster.pid`."""
    return int((data_dir / "postmaster.pid").read_text().split()[0])
