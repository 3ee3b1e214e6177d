"""Which files of a copy run's directory are removed after its commit: exactly those the
commit does not reference, and nothing when the listing and the commit do not match up."""

from __future__ import annotations

from pathlib import Path

import pytest

from streambed.copy.orphans import UnsafeSweep, orphans, remove_orphans

DIR = "s3://lake/wh/public/t/data/copy-r1"
BASE = "lake/wh/public/t/data/copy-r1"


def test_only_files_the_commit_does_not_name_are_orphans() -> None:
    listed = [f"{BASE}/r1-00000-aaaa-00000.parquet", f"{BASE}/r1-00000-bbbb-00000.parquet"]
    listed += [f"{BASE}/r1-00001-cccc-00000.parquet", f"{BASE}/r1-00001-cccc-00001.parquet"]
    committed = [
        f"{DIR}/r1-00000-bbbb-00000.parquet",
        f"{DIR}/r1-00001-cccc-00000.parquet",
        f"{DIR}/r1-00001-cccc-00001.parquet",
    ]
    assert orphans(listed, BASE, committed, DIR) == [f"{BASE}/r1-00000-aaaa-00000.parquet"]


@pytest.mark.parametrize(
    ("listed", "committed", "expected"),
    [
        ([], [], []),  # an empty table: nothing written, nothing committed
        ([f"{BASE}/a.parquet"], [], [f"{BASE}/a.parquet"]),  # every attempt's result lost
        ([f"{BASE}/a.parquet"], [f"{DIR}/a.parquet"], []),
        ([f"{BASE}/sub/a.parquet"], [f"{DIR}/sub/a.parquet"], []),  # compared by relative path
        (
            [f"{BASE}/a.parquet", f"{BASE}/a.parquet.tmp"],
            [f"{DIR}/a.parquet"],
            [f"{BASE}/a.parquet.tmp"],
        ),
    ],
)
def test_selection(listed: list[str], committed: list[str], expected: list[str]) -> None:
    assert orphans(listed, BASE, committed, DIR) == expected


def test_a_committed_file_outside_the_directory_deletes_nothing() -> None:
    # e.g. the commit named files as `file:/x` and the directory is `/x`: same files, other
    # spelling; every listed file would look unreferenced.
    with pytest.raises(UnsafeSweep):
        orphans([f"{BASE}/a.parquet"], BASE, ["s3://lake/elsewhere/a.parquet"], DIR)


def test_a_committed_file_missing_from_the_listing_deletes_nothing() -> None:
    with pytest.raises(UnsafeSweep):
        orphans([f"{BASE}/b.parquet"], BASE, [f"{DIR}/a.parquet"], DIR)


def test_a_listed_file_outside_the_base_deletes_nothing() -> None:
    with pytest.raises(UnsafeSweep):
        orphans(["other/a.parquet"], BASE, [], DIR)


def test_remove_orphans_on_a_local_directory(tmp_path: Path) -> None:
    run = tmp_path / "data" / "copy-r1"
    run.mkdir(parents=True)
    for name in ("kept-0.parquet", "kept-1.parquet", "left-0.parquet"):
        (run / name).write_bytes(b"x")
    committed = [f"{run}/kept-0.parquet", f"{run}/kept-1.parquet"]
    assert remove_orphans(str(run), committed, {}, table="public.t") == 1
    assert sorted(p.name for p in run.iterdir()) == ["kept-0.parquet", "kept-1.parquet"]
    assert remove_orphans(str(run), committed, {}, table="public.t") == 0


def test_remove_orphans_refuses_when_the_spelling_differs(tmp_path: Path) -> None:
    run = tmp_path / "copy-r1"
    run.mkdir()
    (run / "kept.parquet").write_bytes(b"x")
    committed = [f"file://{run}/kept.parquet"]  # another spelling of the same file
    assert remove_orphans(str(run), committed, {}, table="public.t") == 0
    assert (run / "kept.parquet").exists()


def test_remove_orphans_of_a_missing_directory(tmp_path: Path) -> None:
    assert remove_orphans(str(tmp_path / "none"), [], {}, table="public.t") == 0
