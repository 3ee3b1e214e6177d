"""The changes a buffer takes, counted per table and operation for the metrics."""

from __future__ import annotations

from pathlib import Path

from streambed.buffer import ChangeBuffer
from tests.unit.buffer.model import KEY, OTHER, REL, dele, ins, run_txns, trunc, upd


def counting(tmp: Path, frontier: int | None = None) -> ChangeBuffer:
    buf = ChangeBuffer(tmp / "spill", 1 << 30, lambda s, t: frontier, count_changes=True)
    buf.relation(REL, KEY)
    buf.relation(OTHER, KEY)
    return buf


def test_changes_are_counted_as_sent_before_they_collapse(tmp_path: Path) -> None:
    buf = counting(tmp_path)
    run_txns(buf, [[ins(b"1"), ins(b"2"), upd(b"1", b"b")], [dele(b"2"), trunc()]])
    buf.drain()
    name = (REL.namespace, REL.name)
    assert buf.take_changes() == {name: {"insert": 2, "update": 1, "delete": 1, "truncate": 1}}
    assert buf.take_changes() == {}  # taken


def test_changes_the_lake_already_has_are_not_counted(tmp_path: Path) -> None:
    buf = counting(tmp_path, frontier=10_000)
    run_txns(buf, [[ins(b"1")]])
    assert buf.take_changes() == {}


def test_without_counting_nothing_is_counted(tmp_path: Path) -> None:
    buf = ChangeBuffer(tmp_path / "spill", 1 << 30, lambda s, t: None)
    buf.relation(REL, KEY)
    run_txns(buf, [[ins(b"1")]])
    assert buf.take_changes() == {}
