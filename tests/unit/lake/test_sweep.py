"""`sweep.unreferenced`: which listed files of a table's data directory may be deleted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streambed.lake.sweep import Listed, SweepRefused, unreferenced

DIRECTORY = "s3://bucket/wh/public/orders/data"
BASE = "bucket/wh/public/orders/data"
NOW = 1_000_000.0


def _listed(name: str, modified: float = 0.0) -> Listed:
    return Listed(f"{BASE}/{name}", modified, 10)


def _names(files: list[Listed]) -> list[str]:
    return [f.path[len(BASE) + 1 :] for f in files]


def test_only_old_unreferenced_files_outside_running_copies_go() -> None:
    listed = [
        _listed("a.parquet"),  # referenced by the current snapshot
        _listed("old.parquet"),  # referenced by an older snapshot only
        _listed("orphan.parquet"),
        _listed("young.parquet", modified=NOW),
        _listed("copy-run1/run1-00000-x-0.parquet"),  # a copy in progress
        _listed("copy-run0/run0-00000-x-0.parquet"),  # a finished copy's leftover
    ]
    doomed = unreferenced(
        listed,
        BASE,
        referenced=[f"{DIRECTORY}/a.parquet", f"{DIRECTORY}/old.parquet"],
        current=[f"{DIRECTORY}/a.parquet"],
        running=[f"{DIRECTORY}/copy-run1"],
        before=NOW - 60,
    )
    assert _names(doomed) == ["copy-run0/run0-00000-x-0.parquet", "orphan.parquet"]


def test_a_running_copy_protects_its_directory_not_a_sibling_with_a_longer_name() -> None:
    listed = [_listed("copy-run1/x.parquet"), _listed("copy-run10/x.parquet")]
    doomed = unreferenced(
        listed,
        BASE,
        referenced=[],
        current=[],
        running=[f"{DIRECTORY}/copy-run1/"],
        before=NOW,
    )
    assert _names(doomed) == ["copy-run10/x.parquet"]


def test_a_current_file_missing_from_the_listing_refuses_the_sweep() -> None:
    with pytest.raises(SweepRefused, match="current snapshot but not in the listing"):
        unreferenced(
            [_listed("orphan.parquet")],
            BASE,
            referenced=[f"{DIRECTORY}/a.parquet"],
            current=[f"{DIRECTORY}/a.parquet"],
            before=NOW,
        )


def test_a_file_named_with_another_s3_scheme_is_the_same_file() -> None:
    # Another engine may name the table's files s3a://; pyarrow lists them without a scheme.
    doomed = unreferenced(
        [_listed("a.parquet"), _listed("b.parquet")],
        BASE,
        referenced=["s3a://bucket/wh/public/orders/data/a.parquet"],
        current=["s3n://bucket/wh/public/orders/data/b.parquet"],
        before=NOW,
    )
    assert _names(doomed) == []
    with pytest.raises(SweepRefused, match="not under"):
        unreferenced(
            [Listed("elsewhere/a.parquet", 0, 1)], BASE, referenced=[], current=[], before=NOW
        )


def test_local_file_uris_compare_by_path() -> None:
    # The lake's URIs are not percent-encoded: `%20` is three characters of a name.
    listed = ["/wh/t/data/a b.parquet", "/wh/t/data/a%20b.parquet", "/wh/t/data/c.parquet"]
    doomed = unreferenced(
        [Listed(path, 0, 1) for path in listed],
        "/wh/t/data",
        referenced=["file:///wh/t/data/a b.parquet"],
        current=["file:///wh/t/data/a b.parquet"],
        before=NOW,
    )
    assert [f.path for f in doomed] == ["/wh/t/data/a%20b.parquet", "/wh/t/data/c.parquet"]


def test_files_referenced_outside_the_directory_are_ignored() -> None:
    doomed = unreferenced(
        [_listed("a.parquet")],
        BASE,
        referenced=["s3://bucket/elsewhere/a.parquet"],
        current=["s3://bucket/elsewhere/a.parquet"],
        before=NOW,
    )
    assert _names(doomed) == ["a.parquet"]


NAMES = st.lists(
    st.from_regex(r"(copy-r[0-9]/)?[a-z]{1,3}\.parquet", fullmatch=True), unique=True, max_size=12
)


@given(
    names=NAMES,
    data=st.data(),
)
def test_the_doomed_are_exactly_the_unreferenced_old_files_outside_running_copies(
    names: list[str], data: st.DataObject
) -> None:
    ages = {n: data.draw(st.sampled_from([0.0, NOW])) for n in names}
    referenced = data.draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    current = data.draw(st.lists(st.sampled_from(referenced), unique=True)) if referenced else []
    running = data.draw(st.lists(st.sampled_from(["copy-r1", "copy-r2"]), unique=True))
    doomed = unreferenced(
        [_listed(n, ages[n]) for n in names],
        BASE,
        referenced=[f"{DIRECTORY}/{n}" for n in referenced],
        current=[f"{DIRECTORY}/{n}" for n in current],
        running=[f"{DIRECTORY}/{r}" for r in running],
        before=NOW - 1,
    )
    expected = sorted(
        n
        for n in names
        if n not in referenced
        and ages[n] < NOW - 1
        and not any(n.startswith(r + "/") for r in running)
    )
    assert _names(doomed) == expected
    assert not set(_names(doomed)) & set(referenced)  # never a referenced file


def test_a_current_file_is_kept_even_if_the_snapshot_list_misses_it() -> None:
    doomed = unreferenced(
        [_listed("a.parquet")], BASE, referenced=[], current=[f"{DIRECTORY}/a.parquet"], before=NOW
    )
    assert doomed == []
