"""The source at a later LSN: its snapshot plus the changes committed after it.

`Overlay.build` folds a table's in-flight changes (`streambed.verify.inflight.Change`) into
what they leave: for a keyed table the final row of every key they touched (None: deleted),
for a keyless table the rows they added (+1) and removed (-1). The source side of the
comparison is then the snapshot's rows minus the touched keys (keyed) plus the overlay's
rows, or the snapshot's rows plus the delta (keyless). A TRUNCATE among them removes every
snapshot row. A value an UPDATE left unchanged (TOAST) is taken from the key's previous
row: an earlier change, or the snapshot's row (`needs_base`, filled by `fill`). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streambed.pgoutput.messages import UNCHANGED
from streambed.verify import hashing
from streambed.verify.hashing import Bucket, Row, Summary

Text = tuple[Any, ...]  # text values; UNCHANGED until `fill`
Key = tuple[str | None, ...]


def _text(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode()
    return value  # None or UNCHANGED


@dataclass
class Overlay:
    columns: tuple[str, ...]
    key: tuple[str, ...]
    truncated: bool = False
    rows: dict[Key, Text | None] = field(default_factory=dict)  # keyed tables
    delta: list[tuple[Text, int]] = field(default_factory=list)  # keyless tables
    needs_base: dict[Key, Key] = field(default_factory=dict)  # key -> base key to fill from

    @classmethod
    def build(cls, columns: Sequence[str], key: Sequence[str], changes: Iterable[Any]) -> Overlay:
        overlay = cls(tuple(columns), tuple(key))
        for change in changes:
            overlay._fold(change)
        return overlay

    def _row(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(_text(values.get(c)) for c in self.columns)

    def _key_of(self, row: Sequence[Any]) -> Key:
        return tuple(row[self.columns.index(k)] for k in self.key)

    def _fold(self, change: Any) -> None:
        if change.kind == "truncate":
            self.truncated = True
            self.rows = {}
            self.delta = []
            self.needs_base = {}
            return
        new = None if change.new is None else self._row(change.new)
        old = None if change.old is None else self._row(change.old)
        if not self.key:
            if old is not None:
                self.delta.append((old, -1))
            if new is not None:
                filled = tuple(
                    (old[i] if old is not None else None) if v is UNCHANGED else v
                    for i, v in enumerate(new)
                )
                self.delta.append((filled, 1))
            return
        old_key = None if old is None else self._key_of(old)
        if new is None:
            assert old_key is not None
            self.rows[old_key] = None
            self.needs_base.pop(old_key, None)
            return
        new_key = self._key_of(new)
        source_key = new_key if old_key is None else old_key
        prior: Any = self.rows.get(source_key, None if self.truncated else UNCHANGED)
        base = self.needs_base.get(source_key)
        if old_key is not None and old_key != new_key:
            self.rows[old_key] = None
            self.needs_base.pop(old_key, None)
        if any(v is UNCHANGED for v in new):
            if prior is UNCHANGED:  # the snapshot's row has the value
                self.needs_base[new_key] = source_key if base is None else base
            elif prior is not None:
                new = tuple(p if v is UNCHANGED else v for v, p in zip(new, prior, strict=True))
                if base is not None:
                    self.needs_base[new_key] = base
        else:
            self.needs_base.pop(new_key, None)
        self.rows[new_key] = new

    def fill(self, base: Mapping[Key, Text]) -> list[Key]:
        """Fill unchanged values from the snapshot's rows; the keys it could not fill."""
        missing = []
        for key, base_key in self.needs_base.items():
            row = self.rows.get(key)
            source = base.get(base_key)
            if row is None:
                continue
            if source is None:
                missing.append(key)
                continue
            self.rows[key] = tuple(
                s if v is UNCHANGED else v for v, s in zip(row, source, strict=True)
            )
        self.needs_base = {}
        return missing

    @property
    def touched(self) -> list[str]:
        """Key digests whose snapshot rows the overlay replaces (keyed tables)."""
        return [hashing.key_digest(hashing.row_form(_encode(k))) for k in self.rows]

    def _rows(self) -> list[tuple[Text, int]]:
        if self.key:
            return [(row, 1) for row in self.rows.values() if row is not None]
        return self.delta

    def add_to(self, summary: Summary, parent: Bucket, modulus: int) -> Summary:
        """`summary` (the snapshot's, touched keys left out) with the overlay's rows."""
        offset, _ = hashing.child_step(parent, modulus)
        out = dict(summary)
        for row, sign in self._rows():
            digest = self._digest(row)
            if not hashing.in_bucket(digest, parent):
                continue
            value = hashing.step_value(digest, offset, modulus)
            n, s = out.get(value, (0, 0))
            out[value] = (n + sign, s + sign * hashing.row_hash(hashing.row_form(_encode(row))))
        return {b: v for b, v in out.items() if v[0] != 0 or v[1] != 0}

    def apply(self, rows: list[Row], buckets: Sequence[Bucket]) -> list[Row]:
        """The snapshot's `rows` of `buckets` (touched keys left out) with the overlay's."""
        out = list(rows)
        wanted = hashing.BucketSet(buckets)
        for row, sign in self._rows():
            if self._digest(row) not in wanted:
                continue
            made = Row(
                self._key_of(row) if self.key else row,
                row,
                hashing.row_hash(hashing.row_form(_encode(row))),
            )
            if sign > 0:
                out.append(made)
            else:
                for i, r in enumerate(out):
                    if r.text == row:
                        del out[i]
                        break
        return out

    def _digest(self, row: Text) -> str:
        key = self._key_of(row) if self.key else row
        return hashing.key_digest(hashing.row_form(_encode(key)))


def _encode(values: Sequence[str | None]) -> list[bytes | None]:
    return [None if v is None else v.encode() for v in values]
