"""The pure parts of `streambed verify`: canonical forms, buckets, bisection planning and
the row comparison."""

from __future__ import annotations

import hashlib

from streambed.verify import hashing
from streambed.verify.hashing import Row


def test_row_form_is_postgres_record_text() -> None:
    # a comma inside a value, a NULL, an empty string and quotes all differ, as record_out
    # writes them: ROW('a,b', NULL)::text is ("a,b",)
    assert hashing.row_form([b"a,b", None]) == b'("a,b",)'
    assert hashing.row_form([b"a", b"b", None]) == b"(a,b,)"
    assert hashing.row_form([b""]) == b'("")'
    assert hashing.row_form([None]) == b"()"
    assert hashing.row_form([]) == b"()"
    assert hashing.row_form([b'say "hi"', b"back\\slash"]) == b'("say ""hi""","back\\\\slash")'
    for space in (b" ", b"\t", b"\n", b"\v", b"\f", b"\r", b"(", b")"):
        assert hashing.row_form([b"a" + space]) == b'("a' + space + b'")'
    assert hashing.row_form(["é".encode()]) == "(é)".encode()


def test_row_hash_is_the_first_64_bits_of_md5_signed() -> None:
    digest = hashlib.md5(b"1:x").digest()
    assert hashing.row_hash(b"1:x") == int.from_bytes(digest[:8], "big", signed=True)
    assert hashing.row_hash(b"1:x") != hashing.row_hash(b"1:y")


def test_sql_matches_python() -> None:
    # the SQL the source runs uses the same digits and moduli as the Python side
    text = '(CASE WHEN num_nulls("a") = 0 THEN format(\'%s\', "a") END)'
    assert hashing.sql_text('"a"') == text
    assert hashing.sql_row_form(['"a"', '"b"']) == 'ROW("a", "b")::text'
    step = hashing.sql_step("d", 16, 10)
    assert "substr(d, 17, 7)" in step and "bit(28)" in step and "% 10" in step
    assert hashing.sql_bucket("d", ()) == "true"
    digest = "0123456789abcdef" + "0000010" + "fffffff" + "00"
    assert hashing.step_value(digest, 16, 7) == 0x10 % 7
    assert hashing.in_bucket(digest, ((16, 7, 0x10 % 7), (23, 5, 0xFFFFFFF % 5)))
    assert not hashing.in_bucket(digest, ((16, 7, (0x10 + 1) % 7),))


def test_first_level_buckets() -> None:
    assert hashing.first_level(0) == 1
    assert hashing.first_level(-1) == 1  # Postgres's reltuples before the first ANALYZE
    assert hashing.first_level(hashing.BUCKET_ROWS) == 1
    assert hashing.first_level(hashing.BUCKET_ROWS + 1) == 2
    assert hashing.first_level(10**12) == hashing.MAX_BUCKETS


def test_differing_and_plan() -> None:
    source = {0: (10, 5), 1: (3, 7), 2: (hashing.ROWS_LIMIT + 1, 1)}
    lake = {0: (10, 5), 1: (3, 8), 3: (1, 1), 2: (hashing.ROWS_LIMIT + 1, 2)}
    diffs = hashing.differing(source, lake)
    assert diffs == [1, 2, 3]
    read, split = hashing.plan((), 4, diffs, source, lake)
    assert read == [((16, 4, 1),), ((16, 4, 3),)]
    assert split == [((16, 4, 2),)]  # too many rows to read: bisected again
    # at the last level a bucket is read however big
    read, split = hashing.plan(((16, 4, 2),), 8, [5], {5: (10**6, 0)}, {})
    assert read == [((16, 4, 2), (23, 8, 5))] and split == []
    assert hashing.child_step(((16, 4, 2),), 8) == (23, 8)


def _row(key: str, *rest: str | None) -> Row:
    text = (key, *rest)
    form = hashing.row_form([None if v is None else v.encode() for v in text])
    return Row((key,), text, hashing.row_hash(form))


def test_compare_keyed() -> None:
    source = [_row("1", "a"), _row("2", "b"), _row("4", None)]
    lake = [_row("1", "a"), _row("2", "B"), _row("3", "c"), _row("4", None)]
    diffs = hashing.compare_keyed(source, lake)
    assert [(d.key, d.source, d.lake) for d in diffs] == [
        (("2",), ("2", "b"), ("2", "B")),
        (("3",), None, ("3", "c")),
    ]
    assert hashing.compare_keyed(lake, source)[1].source == ("3", "c")


def test_compare_multiset_counts_copies() -> None:
    dup = Row(("1", "x"), ("1", "x"), 7)
    other = Row(("2", "y"), ("2", "y"), 9)
    diffs = hashing.compare_multiset([dup, other], [dup, dup, other])
    assert len(diffs) == 1
    assert (diffs[0].source_count, diffs[0].lake_count) == (1, 2)
    assert hashing.compare_multiset([dup, dup], [dup, dup]) == []
    missing = hashing.compare_multiset([other], [])
    assert missing[0].lake is None and missing[0].source_count == 1


def test_bucket_set() -> None:
    low = "0" * 16 + "0000001" + "0000002" + "00"  # first step 1, second step 2
    high = "0" * 16 + "0000003" + "0000005" + "00"
    buckets = [((16, 4, 1),), ((16, 4, 3), (23, 8, 5))]
    wanted = hashing.BucketSet(buckets)
    assert low in wanted and high in wanted
    assert ("0" * 16 + "0000003" + "0000004" + "00") not in wanted  # second step 4, not 5
    assert ("0" * 16 + "0000002" + "0000002" + "00") not in wanted
    assert "anything" in hashing.BucketSet([()])
    assert low not in hashing.BucketSet([])
    sql = wanted.sql("d")
    assert " IN (1)" in sql and "= 3 AND" in sql and "% 8) = 5" in sql
    assert hashing.BucketSet([]).sql("d") == "false"


def test_duckdb_forms_match_python() -> None:
    import duckdb
    import pyarrow as pa

    rows = [("1", "a,b"), ("22", None), ("é", ""), (None, "N"), ('"q"', "b\\s (x)")]
    rows += [(f"a{c}b", "\x0b") for c in "\t\n\x0b\f\r ,()"]
    rows += [(str(i), "x" * i) for i in range(40)]
    table = pa.table({"c0": [r[0] for r in rows], "c1": [r[1] for r in rows]})
    conn = duckdb.connect()
    conn.register("t", table)
    form = hashing.duck_row_form(["c0", "c1"])
    query = (
        f"SELECT {form}, {hashing.DUCK_ROW_HASH.format(digest=f'md5({form})')}, "
        f"{hashing.duck_step(f'md5({form})', 16, 1000)} FROM t"
    )
    got = conn.execute(query).fetchall()
    for (text_form, row_hash, step), row in zip(got, rows, strict=True):
        python = hashing.row_form([None if v is None else v.encode() for v in row])
        assert text_form.encode() == python
        assert row_hash == hashing.row_hash(python)
        assert step == hashing.step_value(hashing.key_digest(python), 16, 1000)
    assert any(h < 0 for _, h, _ in got) and any(h > 0 for _, h, _ in got)  # both signs
