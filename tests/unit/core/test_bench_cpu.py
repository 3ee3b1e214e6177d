"""`bench.cpu`: a process tree's CPU seconds, live children and reaped ones alike."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.cpu import postmaster_pid, tree_cpu

BURN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"


def test_a_live_child_counts_in_its_parents_tree() -> None:
    before = tree_cpu(os.getpid())
    child = subprocess.Popen(
        [sys.executable, "-c", BURN + "print('done', flush=True)\ntime.sleep(30)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "done\n"
        assert tree_cpu(child.pid) >= 0.35
        assert tree_cpu(os.getpid()) - before >= 0.35  # the child, not yet reaped
    finally:
        child.kill()
        child.wait()


def test_a_reaped_child_still_counts_once() -> None:
    before = tree_cpu(os.getpid())
    started = time.process_time()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    own = time.process_time() - started
    used = tree_cpu(os.getpid()) - before
    assert 0.35 <= used - own < 1.5  # in our reaped time, not twice


def test_a_pid_that_is_gone_has_used_nothing() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert tree_cpu(child.pid) == 0.0


def test_the_postmaster_pid_is_the_first_line_of_its_file(tmp_path: Path) -> None:
    (tmp_path / "postmaster.pid").write_text("4242\n/data\n1700000000\n5432\n")
    assert postmaster_pid(tmp_path) == 4242
