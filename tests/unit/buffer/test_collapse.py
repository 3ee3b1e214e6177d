"""Collapse per key: table-driven cases of committed transactions → one delta."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from streambed.buffer.changes import TableKey
from streambed.core.errors import SchemaError, StreambedError
from streambed.pgoutput.messages import (
    UNCHANGED,
    Delete,
    Insert,
    Message,
    Relation,
    Update,
)
from tests.unit.buffer.model import (
    COLUMNS,
    OTHER_ID,
    REL,
    REL_ID,
    dele,
    ins,
    new_buffer,
    run_txns,
    trunc,
    upd,
)

Expected = tuple[bool, set[tuple[object, ...]], list[tuple[object, ...]]] | None

CASES: list[tuple[str, list[list[Message]], Expected]] = [
    ("insert", [[ins(b"1", b"a")]], (False, set(), [(b"1", b"a", b"B")])),
    (
        "insert then update, one txn",
        [[ins(b"1", b"a"), upd(b"1", b"b")]],
        (False, set(), [(b"1", b"b", b"B")]),
    ),
    (
        "insert then update, two txns",
        [[ins(b"1", b"a")], [upd(b"1", b"b", b"C")]],
        (False, set(), [(b"1", b"b", b"C")]),
    ),
    ("insert then delete", [[ins(b"1")], [dele(b"1")]], None),
    ("update", [[upd(b"1", b"b", b"C")]], (False, {(b"1",)}, [(b"1", b"b", b"C")])),
    (
        "update keeps UNCHANGED when the row is not buffered",
        [[upd(b"1", b"b")]],
        (False, {(b"1",)}, [(b"1", b"b", UNCHANGED)]),
    ),
    (
        "UNCHANGED filled from the buffered row",
        [[ins(b"1", b"a", b"BIG")], [upd(b"1", b"b"), upd(b"1", b"c")]],
        (False, set(), [(b"1", b"c", b"BIG")]),
    ),
    (
        "UNCHANGED stays through two updates of an unbuffered row",
        [[upd(b"1", b"b")], [upd(b"1", b"c")]],
        (False, {(b"1",)}, [(b"1", b"c", UNCHANGED)]),
    ),
    ("delete", [[dele(b"1")]], (False, {(b"1",)}, [])),
    ("update then delete", [[upd(b"1")], [dele(b"1")]], (False, {(b"1",)}, [])),
    (
        "delete then insert of the same key",
        [[dele(b"1")], [ins(b"1", b"c")]],
        (False, {(b"1",)}, [(b"1", b"c", b"B")]),
    ),
    (
        "key change of an unbuffered row",
        [[upd(b"2", b"b", b"C", old_key=b"1")]],
        (False, {(b"1",), (b"2",)}, [(b"2", b"b", b"C")]),
    ),
    (
        "key change of a buffered insert fills UNCHANGED from the old key's row",
        [[ins(b"1", b"a", b"BIG")], [upd(b"2", b"b", old_key=b"1")]],
        (False, {(b"2",)}, [(b"2", b"b", b"BIG")]),
    ),
    (
        "key change back and forth",
        [[upd(b"2", b"b", b"C", old_key=b"1")], [upd(b"1", b"c", old_key=b"2")]],
        (False, {(b"1",), (b"2",)}, [(b"1", b"c", b"C")]),
    ),
    (
        "key change, then the old key is inserted again",
        [[upd(b"2", b"b", b"C", old_key=b"1"), ins(b"1", b"n")]],
        (False, {(b"1",), (b"2",)}, [(b"2", b"b", b"C"), (b"1", b"n", b"B")]),
    ),
    (
        "update with an unchanged key sent as old key",
        [[upd(b"1", b"b", b"C", old_key=b"1")]],
        (False, {(b"1",)}, [(b"1", b"b", b"C")]),
    ),
    (
        "truncate in the middle discards what came before",
        [[ins(b"1"), upd(b"2"), dele(b"3")], [trunc(), ins(b"4")], [upd(b"4", b"x")]],
        (True, set(), [(b"4", b"x", b"B")]),
    ),
    ("truncate alone", [[ins(b"1")], [trunc()]], (True, set(), [])),
    (
        "insert, delete, insert in one txn",
        [[ins(b"1", b"a"), dele(b"1"), ins(b"1", b"b")]],
        (False, set(), [(b"1", b"b", b"B")]),
    ),
]


@pytest.mark.parametrize(("txns", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_collapse(tmp_path: Path, txns: list[list[Message]], expected: Expected) -> None:
    buf = new_buffer(tmp_path)
    lsn = run_txns(buf, txns)
    assert buf.last_commit_lsn == lsn
    assert buf.dirty is True
    deltas = buf.drain()
    if expected is None:
        assert deltas == []
        return
    (delta,) = deltas
    truncated, removed, rows = expected
    assert delta.relation == REL
    assert delta.commit_lsn == lsn
    assert delta.truncated is truncated
    assert len(delta.removed_keys) == len(set(delta.removed_keys))
    assert set(delta.removed_keys) == removed
    assert Counter(delta.rows) == Counter(rows)
    assert (buf.dirty, buf.pending_rows, buf.pending_bytes) == (False, 0, 0)
    assert buf.drain() == []


def test_frontier_skips_transactions_already_in_the_lake(tmp_path: Path) -> None:
    frontiers = {"t": 150, "other": None}
    buf = new_buffer(tmp_path)
    buf._frontier = lambda schema, table: frontiers[table]  # the lake's frontier per table
    buf.begin(1)
    buf.insert(ins(b"1", b"old"))
    buf.insert(ins(b"1", b"o", rel=OTHER_ID))
    buf.commit(150, 151)  # t has it already; other does not
    buf.begin(2)
    buf.update(upd(b"1", b"new", b"B"))
    buf.commit(160, 161)
    deltas = {d.table_name: d for d in buf.drain()}
    assert deltas["t"].rows == ((b"1", b"new", b"B"),)
    assert deltas["t"].removed_keys == ((b"1",),)
    assert deltas["other"].rows == ((b"1", b"o", b"B"),)
    assert {d.commit_lsn for d in deltas.values()} == {160}
    assert buf.last_end_lsn == 161


def test_frontier_skip_of_everything_leaves_buffer_clean(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path, frontier=1000)
    run_txns(buf, [[ins(b"1")], [dele(b"2")]])
    assert not buf.dirty
    assert buf.drain() == []


def test_commit_sent_again_after_reconnect_is_skipped(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path, frontier=None)
    buf.begin(1)
    buf.insert(ins(b"1"))
    buf.commit(200, 201)
    buf.begin(1)
    buf.update(upd(b"1", b"again", b"C"))
    buf.commit(200, 201)
    (delta,) = buf.drain()
    assert delta.rows == ((b"1", b"v", b"B"),)


def test_all_dirty_tables_share_the_last_commit_lsn(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    run_txns(buf, [[ins(b"1")], [ins(b"2", rel=OTHER_ID)], [ins(b"3")]], lsn=1000)
    deltas = buf.drain()
    assert sorted(d.table_name for d in deltas) == ["other", "t"]
    assert {d.commit_lsn for d in deltas} == {1030}


def test_uncommitted_transaction_is_not_drained(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    run_txns(buf, [[ins(b"1")]])
    buf.begin(9)
    buf.insert(ins(b"2"))
    open_before = buf.in_transaction
    (delta,) = buf.drain()
    assert delta.rows == ((b"1", b"v", b"B"),)
    buf.commit(500, 501)
    assert (open_before, buf.in_transaction) == (True, False)
    (delta,) = buf.drain()
    assert delta.rows == ((b"2", b"v", b"B"),)
    assert delta.commit_lsn == 500


def test_multi_column_key(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    buf.relation(REL, TableKey((0, 1)))
    run_txns(
        buf,
        [
            [Insert(REL_ID, (b"1", b"a", b"x")), Insert(REL_ID, (b"1", b"b", b"y"))],
            [Update(REL_ID, (b"1", b"a", b"z")), Delete(REL_ID, (b"2", b"a", None), True)],
            [Update(REL_ID, (b"1", b"c", b"w"), old=(b"1", b"b", None), old_is_key_only=True)],
        ],
    )
    (delta,) = buf.drain()
    assert set(delta.removed_keys) == {(b"2", b"a"), (b"1", b"c")}
    assert set(delta.rows) == {(b"1", b"a", b"z"), (b"1", b"c", b"w")}


def test_full_old_row_fills_unchanged_and_detects_key_change(tmp_path: Path) -> None:
    rel = Relation(REL_ID, "public", "t", "f", COLUMNS)
    buf = new_buffer(tmp_path)
    buf.relation(rel, TableKey((0,)))
    old = (b"1", b"a", b"BIG")
    run_txns(buf, [[Update(REL_ID, (b"2", b"b", UNCHANGED), old=old)]])
    (delta,) = buf.drain()
    assert set(delta.removed_keys) == {(b"1",), (b"2",)}
    assert delta.rows == ((b"2", b"b", b"BIG"),)


def test_delete_without_key_value_is_a_protocol_error(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    with pytest.raises(StreambedError, match="no value for a key column"):
        run_txns(buf, [[Delete(REL_ID, (None, b"x", None), True)]])


def test_change_for_unknown_relation_fails(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    with pytest.raises(StreambedError, match="before its Relation message"):
        run_txns(buf, [[ins(b"1", rel=999)]])


@pytest.mark.parametrize("bad", [upd(b"1"), dele(b"1")], ids=["update", "delete"])
def test_append_only_table_rejects_update_and_delete(tmp_path: Path, bad: Message) -> None:
    buf = new_buffer(tmp_path)
    buf.relation(Relation(REL_ID, "public", "t", "n", COLUMNS), TableKey(()))
    with pytest.raises(SchemaError) as info:
        run_txns(buf, [[ins(b"1")], [bad]])
    message = str(info.value)
    assert "public.t" in message
    assert "primary key" in message
    assert "ALTER TABLE public.t REPLICA IDENTITY FULL" in message


def test_append_only_table_keeps_duplicates_and_truncates(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    buf.relation(Relation(REL_ID, "public", "t", "n", COLUMNS), TableKey(()))
    run_txns(buf, [[ins(b"1"), ins(b"1")]])
    (delta,) = buf.drain()
    assert delta.rows == ((b"1", b"v", b"B"), (b"1", b"v", b"B"))
    assert delta.append_only
    run_txns(buf, [[ins(b"1")], [trunc(), ins(b"2")]], lsn=900)
    (delta,) = buf.drain()
    assert delta.truncated
    assert delta.rows == ((b"2", b"v", b"B"),)


def test_full_row_identity_is_a_multiset(tmp_path: Path) -> None:
    rel = Relation(REL_ID, "public", "t", "f", COLUMNS)
    buf = new_buffer(tmp_path)
    buf.relation(rel, TableKey((), full_row=True))
    a, b, c = (b"1", b"a", b"x"), (b"2", b"b", b"y"), (b"3", b"c", b"z")
    run_txns(
        buf,
        [
            [Insert(REL_ID, a), Insert(REL_ID, a), Insert(REL_ID, b)],
            [Delete(REL_ID, a, False)],  # cancels one buffered copy
            [Delete(REL_ID, c, False)],  # not buffered: removed from the lake
            [Update(REL_ID, (b"2", b"B", UNCHANGED), old=b)],  # buffered: replaced
            [Update(REL_ID, (b"3", b"C", UNCHANGED), old=c)],  # c was deleted; a lake copy
        ],
    )
    (delta,) = buf.drain()
    assert Counter(delta.removed_keys) == Counter([c, c])
    assert Counter(delta.rows) == Counter([a, (b"2", b"B", b"y"), (b"3", b"C", b"z")])


def test_full_row_update_without_old_row_fails(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    buf.relation(Relation(REL_ID, "public", "t", "f", COLUMNS), TableKey((), full_row=True))
    with pytest.raises(StreambedError, match="no value"):
        run_txns(buf, [[upd(b"1")]])


def test_accounting_and_flush_triggers(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    assert not buf.should_flush(0.0, 1, 1, 0.0)
    run_txns(buf, [[ins(b"1", b"a" * 1000), ins(b"2")]])
    assert buf.pending_rows == 2
    assert buf.pending_bytes > 1000
    size = buf.pending_bytes
    run_txns(buf, [[upd(b"1", b"b", b"B")]], lsn=300)  # replaces the big row
    assert buf.pending_rows == 2
    assert buf.pending_bytes < size - 900
    run_txns(buf, [[dele(b"2"), ins(b"3")]], lsn=400)
    assert buf.pending_rows == 3
    assert not buf.should_flush(10.0, 100, 1 << 20, 5.0)  # starts the interval clock
    assert not buf.should_flush(14.9, 100, 1 << 20, 5.0)
    assert buf.should_flush(15.0, 100, 1 << 20, 5.0)
    assert buf.should_flush(10.0, 3, 1 << 20, 5.0)
    assert buf.should_flush(10.0, 100, buf.pending_bytes, 5.0)
    buf.drain()
    assert not buf.should_flush(100.0, 1, 1, 0.0)
    run_txns(buf, [[ins(b"4")]], lsn=500)
    assert not buf.should_flush(100.0, 100, 1 << 20, 5.0)  # the clock restarts after a drain


def test_relation_change_needs_flush_first(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    wider = Relation(REL_ID, "public", "t", "d", (*COLUMNS, COLUMNS[1]))
    assert not buf.needs_flush_before(wider)
    run_txns(buf, [[ins(b"1")]])
    same_with_xid = Relation(REL_ID, "public", "t", "d", COLUMNS, xid=77)
    assert not buf.needs_flush_before(same_with_xid)
    buf.relation(same_with_xid, TableKey((0,)))  # a re-send: nothing happens
    assert buf.needs_flush_before(wider)
    assert buf.needs_flush_before(REL, TableKey((0, 1)))
    renamed = Relation(REL_ID, "public", "t2", "d", COLUMNS)
    assert buf.needs_flush_before(renamed)
    recreated = Relation(REL_ID + 100, "public", "t", "d", COLUMNS)
    assert buf.needs_flush_before(recreated)
    with pytest.raises(StreambedError, match="needs_flush_before"):
        buf.relation(wider, TableKey((0,)))
    (delta,) = buf.drain()
    assert delta.relation == REL
    buf.relation(wider, TableKey((0,)))
    run_txns(buf, [[Insert(REL_ID, (b"1", b"a", b"b", b"c"))]], lsn=800)
    (delta,) = buf.drain()
    assert delta.relation == wider
    assert delta.rows == ((b"1", b"a", b"b", b"c"),)


def test_layout_change_inside_a_transaction_with_staged_rows_fails(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    buf.begin(1)
    buf.insert(ins(b"1"))
    wider = Relation(REL_ID, "public", "t", "d", (*COLUMNS, COLUMNS[1]))
    with pytest.raises(SchemaError, match="inside a transaction"):
        buf.relation(wider, TableKey((0,)))


def test_out_of_order_messages_are_protocol_errors(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    with pytest.raises(StreambedError, match="outside a transaction"):
        buf.insert(ins(b"1"))
    with pytest.raises(StreambedError, match="without Begin"):
        buf.commit(1, 2)
    buf.begin(1)
    with pytest.raises(StreambedError, match="inside another transaction"):
        buf.begin(2)
    with pytest.raises(StreambedError, match="inside another transaction"):
        buf.stream_start(3)


def test_key_columns_must_fit_the_relation(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    with pytest.raises(StreambedError, match="outside its 3 columns"):
        buf.relation(REL, TableKey((3,)))


def test_full_row_truncate_and_key_only_delete(tmp_path: Path) -> None:
    buf = new_buffer(tmp_path)
    buf.relation(Relation(REL_ID, "public", "t", "f", COLUMNS), TableKey((), full_row=True))
    row = (b"1", b"a", b"x")
    run_txns(buf, [[Insert(REL_ID, row), Delete(REL_ID, (b"9", b"z", b"z"), False)]])
    assert buf.pending_rows == 2
    run_txns(
        buf, [[trunc(), Insert(REL_ID, row)], [Delete(REL_ID, (b"7", b"q", b"q"), False)]], lsn=200
    )
    assert buf.pending_rows == 1
    (delta,) = buf.drain()
    assert (delta.truncated, delta.removed_keys, delta.rows) == (True, (), (row,))
    with pytest.raises(StreambedError, match="no value"):
        run_txns(buf, [[Delete(REL_ID, (b"1", None, None), True)]], lsn=900)


def test_rows_bytes_counts_like_row_bytes() -> None:
    from streambed.buffer.table import row_bytes, rows_bytes
    from streambed.pgoutput.messages import UNCHANGED, Binary

    plain = [(b"1", b"", None), (b"22", b"abc", b"x" * 100)]
    odd = [*plain, (b"3", Binary(b"\x00\x01"), UNCHANGED)]
    for rows in (plain, odd, []):
        assert rows_bytes(rows) == sum(map(row_bytes, rows))  # type: ignore[arg-type]
