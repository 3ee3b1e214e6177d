"""Pure parts of `streambed verify`: the canonical row form, its hashes, the hash buckets a
table is split into, and the comparison of bucket summaries and of rows. No I/O.

A row's canonical form is the text Postgres writes for a record of its columns
(`ROW(a, b)::text`, record_out): `(` the columns' text forms joined by `,` `)`, nothing for
NULL, a value that is empty or holds `"`, `\\`, `(`, `)`, `,` or ASCII white space in double
quotes with `"` and `\\` doubled: unambiguous, and one call per row in the source's SQL
(`sql_row_form`, which runs every column's output function itself). The lake writes it in
DuckDB SQL over the values' Postgres text (`duck_row_form`), Python for single rows
(`row_form`); all hash it with md5. The row hash is the first 16 hex digits
as a signed 64-bit integer; the bucket comes from other digits of the md5 of the *key's*
canonical form (the row's, for a table without a key), so a row and its changed version
fall in the same bucket.

A bucket is named by a path of (digit offset, modulus, value) steps: the first level splits
the table into about `rows / BUCKET_ROWS` buckets, and a differing bucket with more rows
than `ROWS_LIMIT` is bisected further with the next 7 hex digits into `SPLIT` parts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

BUCKET_ROWS: Final = 2000  # rows per first-level bucket, roughly
MAX_BUCKETS: Final = 1 << 16
ROWS_LIMIT: Final = 20_000  # a differing bucket above this is split again, not read
SPLIT: Final = 16
DIGITS: Final = 7  # hex digits per level (28 bits)
FIRST_OFFSET: Final = 16  # the row hash takes digits 0..15 of its own md5
MAX_LEVELS: Final = 2  # digits 16..29 of the 32

Step = tuple[int, int, int]  # (hex digit offset, modulus, value)
Bucket = tuple[Step, ...]
Summary = dict[int, tuple[int, int]]  # bucket value -> (rows, sum of row hashes)


_QUOTED = re.compile(rb'[\t\n\v\f\r "\\(),]')  # what makes record_out quote a value


def field(value: bytes | None) -> bytes:
    if value is None:
        return b""
    if value and _QUOTED.search(value) is None:
        return value
    return b'"' + value.replace(b"\\", b"\\\\").replace(b'"', b'""') + b'"'


def row_form(values: Sequence[bytes | None]) -> bytes:
    """The canonical form of a row from its columns' Postgres text (None for NULL)."""
    return b"(" + b",".join(field(v) for v in values) + b")"


def row_hash(form: bytes) -> int:
    return int.from_bytes(hashlib.md5(form).digest()[:8], "big", signed=True)


def key_digest(form: bytes) -> str:
    return hashlib.md5(form).hexdigest()


def step_value(digest: str, offset: int, modulus: int) -> int:
    return int(digest[offset : offset + DIGITS], 16) % modulus


def in_bucket(digest: str, bucket: Bucket) -> bool:
    return all(step_value(digest, o, m) == v for o, m, v in bucket)


def first_level(rows: int) -> int:
    """The number of first-level buckets for a table of about `rows` rows."""
    wanted = -(-max(rows, 0) // BUCKET_ROWS)
    return max(1, min(MAX_BUCKETS, wanted))


def child_step(bucket: Bucket, modulus: int) -> tuple[int, int]:
    """(offset, modulus) of the level below `bucket`."""
    return FIRST_OFFSET + DIGITS * len(bucket), modulus


def can_split(bucket: Bucket) -> bool:
    return len(bucket) < MAX_LEVELS


def differing(
    source: Mapping[int, tuple[int, int]], lake: Mapping[int, tuple[int, int]]
) -> list[int]:
    """The bucket values whose (rows, hash sum) differ, in order."""
    return sorted(b for b in set(source) | set(lake) if source.get(b) != lake.get(b))


def plan(
    parent: Bucket, modulus: int, diffs: Iterable[int], source: Summary, lake: Summary
) -> tuple[list[Bucket], list[Bucket]]:
    """Differing buckets under `parent`: those to read row by row (small enough, or at the
    last level) and those to split again."""
    offset = FIRST_OFFSET + DIGITS * len(parent)
    read: list[Bucket] = []
    split: list[Bucket] = []
    for value in diffs:
        bucket = (*parent, (offset, modulus, value))
        rows = max(source.get(value, (0, 0))[0], lake.get(value, (0, 0))[0])
        (split if rows > ROWS_LIMIT and can_split(bucket) else read).append(bucket)
    return read, split


def sql_step(digest_sql: str, offset: int, modulus: int) -> str:
    """The Postgres expression of one step's value on an md5 hex expression."""
    digits = f"substr({digest_sql}, {offset + 1}, {DIGITS})"
    return f"(('x' || {digits})::bit({4 * DIGITS})::int % {modulus})"


def sql_bucket(digest_sql: str, bucket: Bucket) -> str:
    """A Postgres condition for `bucket` on an md5 hex expression."""
    parts = [f"{sql_step(digest_sql, o, m)} = {v}" for o, m, v in bucket]
    return " AND ".join(parts) or "true"


def sql_text(column: str) -> str:
    """A column's text as its type's output function writes it (what the stream sends),
    NULL for NULL. Not `::text`: that cast trims char(n)'s padding, spells booleans
    `true`/`false` and adds `/32` to an inet, unlike their output functions; `format('%s')`
    calls the output function. `num_nulls` tests the value itself (`IS NULL` is true for a
    composite whose fields are all NULL)."""
    return f"(CASE WHEN num_nulls({column}) = 0 THEN format('%s', {column}) END)"


def sql_row_form(columns: Sequence[str]) -> str:
    """The canonical row form of `columns` (quoted identifiers) in Postgres SQL."""
    return f"ROW({', '.join(columns)})::text"


def duck_row_form(columns: Sequence[str]) -> str:
    """The canonical row form in DuckDB SQL over columns holding Postgres text."""
    quoted = [
        f"(CASE WHEN {c} IS NULL THEN '' WHEN {c} <> '' AND NOT regexp_matches({c}, "
        f"'[\\t\\n\\x0B\\f\\r \"\\\\(),]') THEN {c} ELSE '\"' || "
        f"replace(replace({c}, '\\', '\\\\'), '\"', '\"\"') || '\"' END)"
        for c in columns
    ]
    return "'(' || " + " || ',' || ".join(quoted or ["''"]) + " || ')'"


def duck_step(digest_sql: str, offset: int, modulus: int) -> str:
    return f"(('0x' || substr({digest_sql}, {offset + 1}, {DIGITS}))::BIGINT % {modulus})"


def duck_bucket(digest_sql: str, bucket: Bucket) -> str:
    parts = [f"{duck_step(digest_sql, o, m)} = {v}" for o, m, v in bucket]
    return " AND ".join(parts) or "true"


_DUCK_UNSIGNED = "('0x' || substr({digest}, 1, 16))::UBIGINT::HUGEINT"
DUCK_ROW_HASH = (  # the first 16 hex digits as a signed 64-bit integer, as `row_hash`
    f"(CASE WHEN {_DUCK_UNSIGNED} >= 9223372036854775808 "
    f"THEN {_DUCK_UNSIGNED} - 18446744073709551616 ELSE {_DUCK_UNSIGNED} END)"
)

SQL_ROW_HASH = "('x' || substr(md5({form}), 1, 16))::bit(64)::bigint"


@dataclass(frozen=True)
class Row:
    """One row as read for the row-level comparison."""

    key: tuple[str | None, ...]  # key columns' text (the whole row for a keyless table)
    text: tuple[str | None, ...]  # every column's text
    hash: int


@dataclass(frozen=True)
class Difference:
    key: tuple[str | None, ...]
    source: tuple[str | None, ...] | None  # None: the source has no such row
    lake: tuple[str | None, ...] | None
    source_count: int = 1  # keyless tables: how often each side holds the row
    lake_count: int = 1


def compare_keyed(source: Iterable[Row], lake: Iterable[Row]) -> list[Difference]:
    """Rows of one bucket that differ, matched by key, sorted by key."""
    by_key = {r.key: r for r in source}
    out: list[Difference] = []
    seen = set()
    for r in lake:
        seen.add(r.key)
        s = by_key.get(r.key)
        if s is None:
            out.append(Difference(r.key, None, r.text))
        elif s.hash != r.hash:
            out.append(Difference(r.key, s.text, r.text))
    for key, s in by_key.items():
        if key not in seen:
            out.append(Difference(key, s.text, None))
    return sorted(out, key=lambda d: _sort_key(d.key))


def compare_multiset(source: Iterable[Row], lake: Iterable[Row]) -> list[Difference]:
    """Rows of one bucket of a keyless table held a different number of times."""
    counts: dict[tuple[str | None, ...], list[int]] = {}
    for r in source:
        counts.setdefault(r.text, [0, 0])[0] += 1
    for r in lake:
        counts.setdefault(r.text, [0, 0])[1] += 1
    out = [
        Difference(
            text,
            text if s else None,
            text if lake_n else None,
            s,
            lake_n,
        )
        for text, (s, lake_n) in counts.items()
        if s != lake_n
    ]
    return sorted(out, key=lambda d: _sort_key(d.key))


def _sort_key(key: tuple[str | None, ...]) -> tuple[tuple[int, str], ...]:
    return tuple((0, "") if v is None else (1, v) for v in key)


class BucketSet:
    """Membership in any of many buckets, tested with one hash step per row for the
    common case (buckets of one first level); deeper steps only within a first-level hit."""

    def __init__(self, buckets: Sequence[Bucket]) -> None:
        self.everything = any(not b for b in buckets)
        self.first: dict[tuple[int, int], dict[int, list[Bucket]]] = {}
        for b in buckets:
            if b:
                (offset, modulus, value), rest = b[0], b[1:]
                self.first.setdefault((offset, modulus), {}).setdefault(value, []).append(rest)

    def __contains__(self, digest: str) -> bool:
        if self.everything:
            return True
        for (offset, modulus), values in self.first.items():
            rests = values.get(step_value(digest, offset, modulus))
            if rests is not None and any(in_bucket(digest, rest) for rest in rests):
                return True
        return False

    def sql(self, digest_sql: str) -> str:
        """The same test as a Postgres condition."""
        if self.everything:
            return "true"
        parts = []
        for (offset, modulus), values in self.first.items():
            step = sql_step(digest_sql, offset, modulus)
            whole = sorted(v for v, rests in values.items() if () in rests)
            if whole:
                parts.append(f"{step} IN ({', '.join(map(str, whole))})")
            for value, rests in sorted(values.items()):
                for rest in rests:
                    if rest:
                        parts.append(f"({step} = {value} AND {sql_bucket(digest_sql, rest)})")
        return " OR ".join(parts) or "false"
