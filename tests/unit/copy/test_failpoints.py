"""Failpoints that act instead of killing (`reached`): on their count, or over a range."""

from __future__ import annotations

import pytest

from streambed.core import failpoints


@pytest.mark.parametrize(
    ("armed", "fired"),
    [
        ("expire_copy_snapshot", [1]),
        ("expire_copy_snapshot:3", [3]),
        ("expire_copy_snapshot:2-4", [2, 3, 4]),
        ("copy_leftover_file", []),  # another point
        ("", []),
    ],
)
def test_reached(armed: str, fired: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMBED_FAILPOINTS", armed)
    monkeypatch.setattr(failpoints, "_hits", {})
    hits = [n for n in range(1, 7) if failpoints.reached("expire_copy_snapshot")]
    assert hits == fired
