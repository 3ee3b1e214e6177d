"""Streamed (protocol 2) transactions: staging, abort, spill to disk."""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path

import pytest

from streambed.buffer import ChangeBuffer
from streambed.buffer.changes import TableDelta
from streambed.core.errors import StreambedError
from streambed.pgoutput.messages import UNCHANGED, Binary, Insert, Message, Update
from tests.unit.buffer.model import REL_ID, dele, feed, ins, new_buffer, trunc, upd

XID = 700


def stream_block(buf: ChangeBuffer, xid: int, msgs: list[Message], first: bool = False) -> None:
    buf.stream_start(xid, first_segment=first)
    for msg in msgs:
        feed(buf, msg)
    buf.stream_stop()


def streamed(msg: Message, subxid: int = XID) -> Message:
    """The message as sent inside a stream: it carries the (sub)transaction id."""
    return msg.__class__(**{**msg.__dict__, "xid": subxid})


def summary(deltas: list[TableDelta]) -> list[tuple[str, bool, Counter[object], Counter[object]]]:
    return sorted(
        (d.table_name, d.truncated, Counter(d.removed_keys), Counter(d.rows)) for d in deltas
    )


def spill_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "spill").glob("*.spill"))


def test_streamed_commit_applies_every_block(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    stream_block(buf, XID, [streamed(ins(b"1", b"a"))], first=True)
    # an ordinary transaction commits between the blocks
    buf.begin(1)
    buf.insert(ins(b"9"))
    buf.commit(100, 101)
    stream_block(buf, XID, [streamed(upd(b"1", b"b")), streamed(ins(b"2"))])
    assert buf.staged_streams == 1
    assert not buf.in_stream
    (delta,) = buf.drain()
    assert delta.rows == ((b"9", b"v", b"B"),)  # the stream is not committed yet
    buf.stream_commit(XID, 200, 201)
    assert buf.staged_streams == 0
    assert buf.staged_bytes == 0
    (delta,) = buf.drain()
    assert delta.commit_lsn == 200
    assert set(delta.rows) == {(b"1", b"b", b"B"), (b"2", b"v", b"B")}
    assert delta.removed_keys == ()


def test_streamed_abort_drops_the_whole_transaction(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    stream_block(buf, XID, [streamed(ins(b"1")), streamed(dele(b"5"))])
    buf.stream_abort(XID, XID)
    assert buf.staged_streams == 0
    assert buf.staged_bytes == 0
    assert not buf.dirty
    assert buf.drain() == []


def test_streamed_abort_of_a_subtransaction_keeps_the_rest(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    stream_block(
        buf,
        XID,
        [
            streamed(ins(b"1")),
            streamed(ins(b"2"), subxid=701),
            streamed(upd(b"1", b"sub", b"S"), subxid=701),
            streamed(ins(b"3"), subxid=702),
            streamed(upd(b"1", b"top", b"T")),
        ],
    )
    buf.stream_abort(XID, 701)
    buf.stream_commit(XID, 300, 301)
    (delta,) = buf.drain()
    assert set(delta.rows) == {(b"1", b"top", b"T"), (b"3", b"v", b"B")}


def test_interleaved_streams(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    stream_block(buf, 1, [streamed(ins(b"1"), 1)])
    stream_block(buf, 2, [streamed(ins(b"2"), 2)])
    stream_block(buf, 1, [streamed(ins(b"3"), 1)])
    assert buf.staged_streams == 2
    buf.stream_abort(2, 2)
    buf.stream_commit(1, 400, 401)
    (delta,) = buf.drain()
    assert set(delta.rows) == {(b"1", b"v", b"B"), (b"3", b"v", b"B")}


def test_first_segment_again_restarts_the_transaction(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    stream_block(buf, XID, [streamed(ins(b"1"))], first=True)
    stream_block(buf, XID, [streamed(ins(b"1"))], first=True)  # re-sent after a reconnect
    buf.stream_commit(XID, 500, 501)
    (delta,) = buf.drain()
    assert delta.rows == ((b"1", b"v", b"B"),)


def test_streamed_frontier_skip(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path, memory=1, frontier=600)
    stream_block(buf, XID, [streamed(ins(b"1"))])
    buf.stream_commit(XID, 600, 601)
    assert not buf.dirty
    assert spill_files(tmp_path) == []
    assert buf.last_commit_lsn == 600


def test_discard_uncommitted(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path, memory=1)
    stream_block(buf, XID, [streamed(ins(b"1"))])
    buf.begin(3)
    buf.insert(ins(b"2"))
    assert spill_files(tmp_path)
    buf.discard_uncommitted()
    assert not buf.in_transaction
    assert buf.staged_streams == 0
    assert spill_files(tmp_path) == []


MIXED: list[tuple[int, list[Message]]] = [
    (XID, [ins(b"1", b"a", b"BIG"), ins(b"2", b"x", b"y"), dele(b"7")]),
    (XID + 1, [ins(b"3"), upd(b"1", b"sub")]),  # aborted subtransaction
    (XID, [upd(b"1", b"b"), upd(b"4", b"c", UNCHANGED), upd(b"6", b"k", b"K", old_key=b"2")]),
    (XID + 2, [trunc(REL_ID), Insert(REL_ID, (b"5", b"after", Binary(b"\x00\x01")))]),
    (XID, [ins(b"8", b"n", b"")]),
]


def run_mixed(buf: ChangeBuffer) -> list[TableDelta]:
    for i, (subxid, msgs) in enumerate(MIXED):
        stream_block(buf, XID, [streamed(m, subxid) for m in msgs], first=i == 0)
        if subxid == XID + 1:
            buf.stream_abort(XID, subxid)
    buf.stream_commit(XID, 900, 901)
    return buf.drain()


def test_spilled_transaction_gives_the_same_deltas_as_in_memory(tmp_path: Path) -> None:
    in_memory = run_mixed(new_buffer(tmp_path / "a"))
    tiny = new_buffer(tmp_path / "b", memory=1)
    stream_block(tiny, XID, [streamed(m) for m in MIXED[0][1]], first=True)
    assert len(spill_files(tmp_path / "b")) == 1
    assert tiny.staged_bytes == 0
    spilled = run_mixed(tiny)
    assert summary(spilled) == summary(in_memory)
    assert spill_files(tmp_path / "b") == []
    (delta,) = spilled
    assert delta.truncated
    assert set(delta.rows) == {(b"5", b"after", Binary(b"\x00\x01")), (b"8", b"n", b"")}


def test_spill_in_the_middle_of_a_subtransaction(tmp_path: Path) -> None:
    for memory in (1, 10**6):
        buf = new_buffer(tmp_path / str(memory), memory=memory)
        stream_block(buf, XID, [streamed(ins(b"1"), XID + 1)])
        stream_block(buf, XID, [streamed(ins(b"2"), XID + 1), streamed(ins(b"3"))])
        buf.stream_abort(XID, XID + 1)
        buf.stream_commit(XID, 100, 101)
        (delta,) = buf.drain()
        assert delta.rows == ((b"3", b"v", b"B"),), memory


def test_unchanged_survives_the_spill_file_as_the_same_singleton(tmp_path: Path) -> None:
    assert pickle.loads(pickle.dumps(UNCHANGED)) is UNCHANGED
    buf = new_buffer(tmp_path, memory=1)
    stream_block(buf, XID, [streamed(upd(b"1", b"b", UNCHANGED))])
    assert spill_files(tmp_path)
    buf.stream_commit(XID, 100, 101)
    (delta,) = buf.drain()
    (row,) = delta.rows
    assert row[2] is UNCHANGED


def test_stale_spill_files_are_removed_at_start(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    (spill / "123.spill").write_bytes(b"left by a crash")
    (spill / "keep.txt").write_text("not ours")
    ChangeBuffer(spill, 1, lambda schema, table: None)
    assert sorted(p.name for p in spill.iterdir()) == ["keep.txt"]


def test_stream_protocol_errors(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    with pytest.raises(StreambedError, match="Stream Stop without Stream Start"):
        buf.stream_stop()
    buf.stream_start(XID)
    with pytest.raises(StreambedError, match="inside a transaction"):
        buf.stream_commit(XID, 1, 2)
    with pytest.raises(StreambedError, match="inside another transaction"):
        buf.begin(1)


def test_stream_rows_without_xid_belong_to_the_top_transaction(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    stream_block(buf, XID, [Insert(REL_ID, (b"1", b"v", b"B")), Update(REL_ID, (b"1", b"w", b"B"))])
    buf.stream_abort(XID, XID + 5)  # some other subtransaction
    buf.stream_commit(XID, 10, 11)
    (delta,) = buf.drain()
    assert delta.rows == ((b"1", b"w", b"B"),)


def test_commit_and_abort_of_unknown_streams(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    buf.stream_abort(42, 43)  # nothing staged for it: nothing to do
    buf.stream_abort(42, 42)
    buf.stream_commit(42, 700, 701)  # no changes of ours in it: still a commit
    assert (buf.last_commit_lsn, buf.last_end_lsn, buf.dirty) == (700, 701, False)
