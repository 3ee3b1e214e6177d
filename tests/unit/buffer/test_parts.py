"""Large committed transactions handed over in parts, and key changes with TOAST values.

A lake model applies deltas the way the sink does (truncate, remove keys, add rows, fill
UNCHANGED values from the lake row of the row's key or of its `moved` old key). Applying
the parts plus the final delta must give the same lake as applying the whole transaction
at once.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from streambed.buffer import ChangeBuffer
from streambed.buffer.changes import TableDelta
from streambed.pgoutput.messages import UNCHANGED, Delete, Insert, Message, Update
from tests.unit.buffer.model import KEY, OTHER, REL, dele, feed, ins, trunc, upd

XID = 900
Lake = dict[Any, tuple[Any, ...]]


def apply(lake: Lake, delta: TableDelta) -> None:
    if delta.truncated:
        lake.clear()
    old = dict(lake)
    for key in delta.removed_keys:
        lake.pop(key[0], None)
    moved = {new[0]: old_key[0] for new, old_key in delta.moved}
    for row in delta.rows:
        if UNCHANGED in row:
            source = old[moved.get(row[0], row[0])]
            row = tuple(s if v is UNCHANGED else v for v, s in zip(row, source, strict=True))
        lake[row[0]] = row


def random_ops(rng: random.Random, count: int) -> list[Message]:
    ops: list[Message] = []
    for _ in range(count):
        k = str(rng.randrange(40)).encode()
        choice = rng.random()
        if choice < 0.5:
            ops.append(ins(k, b"i", str(rng.random()).encode()))
        elif choice < 0.75:
            ops.append(upd(k, str(rng.random()).encode()))
        elif choice < 0.85:
            ops.append(upd(str(rng.randrange(40, 80)).encode(), b"moved", old_key=k))
        elif choice < 0.98:
            ops.append(dele(k))
        else:
            ops.append(trunc())
    return ops


def valid(ops: list[Message], start: Lake) -> list[Message]:
    """Drop operations Postgres could not have sent (update/delete of a missing key,
    insert of an existing one)."""
    present = set(start)
    out: list[Message] = []
    for op in ops:
        if isinstance(op, Insert):
            key = op.new[0]
            if key in present:
                continue
            present.add(key)
        elif isinstance(op, Update):
            old = op.old[0] if op.old is not None else op.new[0]
            new = op.new[0]
            if old not in present or (new != old and new in present):
                continue
            present.discard(old)
            present.add(new)
        elif isinstance(op, Delete):
            key = op.old[0]
            if key not in present:
                continue
            present.discard(key)
        else:
            present.clear()
        out.append(op)
    return out


def streamed_commit(tmp: Path, ops: list[Message], memory: int) -> list[TableDelta]:
    parts: list[TableDelta] = []
    buf = ChangeBuffer(tmp / "spill", memory, lambda s, t: None, stage=parts.append)
    buf.part_check_ops = 7
    buf.relation(REL, KEY)
    buf.relation(OTHER, KEY)
    buf.stream_start(XID, first_segment=True)
    for op in ops:
        feed(buf, op.__class__(**{**op.__dict__, "xid": XID}))
    buf.stream_stop()
    buf.stream_commit(XID, 500, 501)
    assert all(not p.final for p in parts)
    final = buf.drain()
    assert all(d.final for d in final)
    return parts + final


@pytest.mark.parametrize("seed", range(40))
def test_parts_give_the_same_lake_as_the_whole_transaction(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    start: Lake = {str(k).encode(): (str(k).encode(), b"v", b"big") for k in range(20)}
    ops = valid(random_ops(rng, 300), start)
    whole_lake, parted_lake = dict(start), dict(start)
    (whole,) = streamed_commit(tmp_path / "a", ops, 1 << 30)
    apply(whole_lake, whole)
    deltas = streamed_commit(tmp_path / "b", ops, 2_000)
    assert len(deltas) >= 2  # really handed over in parts
    for delta in deltas:
        apply(parted_lake, delta)
    assert parted_lake == whole_lake


def test_final_delta_is_sent_even_when_the_last_part_took_everything(tmp_path: Path) -> None:
    ops: list[Message] = [ins(str(i).encode(), b"x" * 100) for i in range(50)]
    deltas = streamed_commit(tmp_path, ops, 500)
    assert deltas[-1].final
    assert sum(len(d.rows) for d in deltas) == 50


def test_key_change_with_unchanged_toast_value_names_the_old_key(tmp_path: Path) -> None:
    buf = ChangeBuffer(tmp_path / "spill", 1 << 30, lambda s, t: None)
    buf.relation(REL, KEY)
    buf.begin(1)
    buf.update(upd(b"2", b"v2", old_key=b"1"))  # 1 -> 2, big value not sent
    buf.update(upd(b"3", b"v3", old_key=b"2"))  # 2 -> 3, still not sent
    buf.update(upd(b"3", b"v4"))  # same key, still not sent
    buf.commit(10, 11)
    (delta,) = buf.drain()
    assert delta.rows == ((b"3", b"v4", UNCHANGED),)
    assert delta.moved == (((b"3",), (b"1",)),)
    assert set(delta.removed_keys) == {(b"1",), (b"2",), (b"3",)}


def test_moved_is_forgotten_when_the_row_is_complete(tmp_path: Path) -> None:
    buf = ChangeBuffer(tmp_path / "spill", 1 << 30, lambda s, t: None)
    buf.relation(REL, KEY)
    buf.begin(1)
    buf.update(upd(b"2", b"v2", old_key=b"1"))
    buf.update(upd(b"2", b"v3", big=b"new big value"))
    buf.commit(10, 11)
    (delta,) = buf.drain()
    assert delta.moved == ()
