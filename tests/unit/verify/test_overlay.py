"""Folding in-flight changes into the source side (`streambed.verify.overlay`)."""

from __future__ import annotations

from streambed.pgoutput.messages import UNCHANGED
from streambed.verify import hashing
from streambed.verify.hashing import Row
from streambed.verify.inflight import Change
from streambed.verify.overlay import Overlay

COLUMNS = ("id", "note", "big")


def _c(kind: str, old: dict[str, object] | None, new: dict[str, object] | None) -> Change:
    return Change(1, kind, old, new)


def _v(id_: str, note: str | None, big: object = b"B") -> dict[str, object]:
    return {"id": id_.encode(), "note": None if note is None else note.encode(), "big": big}


def test_keyed_final_rows() -> None:
    changes = [
        _c("insert", None, _v("1", "a")),
        _c("update", None, _v("1", "b")),
        _c("insert", None, _v("2", "x")),
        _c("delete", {"id": b"2", "note": None, "big": None}, None),
        _c("update", {"id": b"3", "note": None, "big": None}, _v("4", "moved")),  # key change
    ]
    overlay = Overlay.build(COLUMNS, ("id",), changes)
    assert overlay.rows == {
        ("1",): ("1", "b", "B"),
        ("2",): None,
        ("3",): None,
        ("4",): ("4", "moved", "B"),
    }
    assert len(overlay.touched) == 4


def test_unchanged_toast_comes_from_the_previous_row() -> None:
    changes = [
        _c("insert", None, _v("1", "a", b"big value")),
        _c("update", None, _v("1", "b", UNCHANGED)),
    ]
    overlay = Overlay.build(COLUMNS, ("id",), changes)
    assert overlay.rows[("1",)] == ("1", "b", "big value")
    assert not overlay.needs_base
    # the value is in the snapshot: filled from the snapshot's row of the (old) key
    overlay = Overlay.build(
        COLUMNS,
        ("id",),
        [_c("update", {"id": b"7", "note": None, "big": None}, _v("8", "c", UNCHANGED))],
    )
    assert overlay.needs_base == {("8",): ("7",)}
    assert overlay.fill({("7",): ("7", "old", "toasted")}) == []
    assert overlay.rows[("8",)] == ("8", "c", "toasted")
    missing = Overlay.build(COLUMNS, ("id",), [_c("update", None, _v("9", "c", UNCHANGED))])
    assert missing.fill({}) == [("9",)]


def test_truncate_drops_the_snapshot() -> None:
    changes = [_c("insert", None, _v("1", "a")), _c("truncate", None, None)]
    changes.append(_c("insert", None, _v("2", "b")))
    overlay = Overlay.build(COLUMNS, ("id",), changes)
    assert overlay.truncated
    assert overlay.rows == {("2",): ("2", "b", "B")}


def _row(values: tuple[str | None, ...], key: tuple[str | None, ...]) -> Row:
    form = hashing.row_form([None if v is None else v.encode() for v in values])
    return Row(key, values, hashing.row_hash(form))


def test_summary_and_rows_of_a_keyed_table() -> None:
    overlay = Overlay.build(COLUMNS, ("id",), [_c("insert", None, _v("5", "new"))])
    summary = overlay.add_to({}, (), 1)
    row = ("5", "new", "B")
    assert summary == {0: (1, _row(row, ("5",)).hash)}
    assert overlay.apply([], [((16, 1, 0),)]) == [_row(row, ("5",))]
    assert overlay.apply([], [((16, 2, 5),)]) == []  # not in that bucket


def test_keyless_delta() -> None:
    x: dict[str, object] = {"id": b"1", "note": b"x", "big": None}
    changes = [
        _c("insert", None, x),
        _c("delete", x, None),
        _c("delete", x, None),
        _c("update", {"id": b"2", "note": None, "big": b"q"}, {**x, "big": UNCHANGED}),
    ]
    overlay = Overlay.build(COLUMNS, (), changes)
    assert overlay.delta == [
        (("1", "x", None), 1),
        (("1", "x", None), -1),
        (("1", "x", None), -1),
        (("2", None, "q"), -1),
        (("1", "x", "q"), 1),
    ]
    base = [_row(("1", "x", None), ("1", "x", None))] * 2 + [
        _row(("2", None, "q"), ("2", None, "q"))
    ]
    everything = [((16, 1, 0),)]
    rows = overlay.apply(base, everything)
    assert sorted((r.text for r in rows), key=repr) == [("1", "x", "q"), ("1", "x", None)]
    summary = overlay.add_to({0: (3, sum(r.hash for r in base))}, (), 1)
    assert summary == {0: (2, sum(r.hash for r in rows))}
