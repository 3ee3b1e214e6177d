"""Two lake tables never share a directory, on a filesystem that does not tell their
names apart (macOS's `User` and `user`) either; tables that already do are not swept.

Linux here has no case-insensitive filesystem (this kernel mounts neither a casefold
tmpfs nor a casefold ext4), so a symlink gives the directory of `user` its second name
`User`, as such a filesystem does: either way `User` and `user` are one directory."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from pyiceberg.table import Table

from streambed.core.config import Settings
from streambed.lake.catalog import open_catalog
from streambed.lake.commit import commit
from streambed.lake.sweep import sweep
from streambed.lake.tables import ensure_table
from streambed.state.store import StateStore
from streambed.storage.uris import split_uri
from tests.integration.lake.test_lake_tables import KEY, RELATION, _write

pytestmark = pytest.mark.integration

LATER = 3600.0  # the sweep runs an hour later, for files older than a second


def _table(settings: Settings, name: str, relation_id: int, ids: range) -> tuple[Table, list[str]]:
    relation = dataclasses.replace(RELATION, name=name, relation_id=relation_id)
    table = ensure_table(open_catalog(settings), relation, KEY)
    files = _write(table, ids)
    commit(table, removed=[], added=files, lsn=100)
    with StateStore(settings.state_path) as state:
        state.register("public", name, relation_id, "ready")
    return table, files


def _ids(settings: Settings, name: str) -> list[int]:
    table = open_catalog(settings).load_table(("public", name))
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def _exists(uri: str) -> bool:
    return Path(split_uri(uri)[1]).is_file()


def test_a_new_table_whose_directory_is_another_tables_gets_one_of_its_own(
    tmp_path: Path,
) -> None:
    settings = Settings(source_url="postgresql://unused", data_dir=tmp_path)
    lower, lower_files = _table(settings, "user", 16384, range(0, 10))
    directory = Path(split_uri(lower.location())[1])
    (directory.parent / "User").symlink_to(directory.name)  # `User` is now `user`

    upper, upper_files = _table(settings, "User", 16385, range(100, 105))
    assert upper.location() == f"{lower.location().removesuffix('user')}User~~2"
    (directory.parent / "USER").symlink_to(directory.name)  # so are `USER`
    (directory.parent / "USER~~2").symlink_to("User~~2")  # and `USER~~2`, `User~~2`
    third, _ = _table(settings, "USER", 16386, range(200, 201))
    assert third.location() == f"{lower.location().removesuffix('user')}USER~~3"

    stray = _write(lower, range(10, 12)) + _write(upper, range(105, 107))  # never committed
    results = sweep(settings, older_than=1, now=time.time() + LATER)
    assert sorted(r.table for r in results) == ["public.USER", "public.User", "public.user"]
    assert all(r.refused is None for r in results)
    assert sorted(p for r in results for p in r.removed) == sorted(split_uri(f)[1] for f in stray)
    assert all(_exists(f) for f in lower_files + upper_files)
    assert _ids(settings, "user") == list(range(0, 10))
    assert _ids(settings, "User") == list(range(100, 105))
    assert _ids(settings, "USER") == [200]


def test_tables_that_share_a_directory_are_not_swept(tmp_path: Path) -> None:
    settings = Settings(source_url="postgresql://unused", data_dir=tmp_path)
    catalog = open_catalog(settings)
    lower, lower_files = _table(settings, "user", 16384, range(0, 10))
    # Placed in the same directory before streambed placed such tables apart.
    upper = catalog.create_table(
        ("public", "User"), schema=lower.schema(), location=lower.location()
    )
    upper_files = _write(upper, range(100, 105))
    commit(upper, removed=[], added=upper_files, lsn=100)
    with StateStore(settings.state_path) as state:
        state.register("public", "User", 16385, "ready")
    other, _ = _table(settings, "orders", 16386, range(0, 3))
    stray = _write(lower, range(10, 12))
    other_stray = _write(other, range(3, 5))

    results = {r.table: r for r in sweep(settings, older_than=1, now=time.time() + LATER)}
    for name, peer in (("public.user", "public.User"), ("public.User", "public.user")):
        refused = results[name].refused
        assert refused is not None and f"directory of {peer} " in refused
        assert "neither is swept" in refused and results[name].removed == []
    assert results["public.orders"].refused is None
    assert sorted(results["public.orders"].removed) == sorted(split_uri(f)[1] for f in other_stray)
    assert all(_exists(f) for f in lower_files + upper_files + stray)
    assert _ids(settings, "user") == list(range(0, 10))
    assert _ids(settings, "User") == list(range(100, 105))


def test_a_table_whose_metadata_is_gone_still_keeps_its_directory(tmp_path: Path) -> None:
    settings = Settings(source_url="postgresql://unused", data_dir=tmp_path)
    lower, _ = _table(settings, "user", 16384, range(0, 3))
    directory = Path(split_uri(lower.location())[1])
    for metadata in (directory / "metadata").glob("*.metadata.json"):
        metadata.unlink()  # `public.user` can no longer be loaded
    (directory.parent / "User").symlink_to(directory.name)
    upper, _ = _table(settings, "User", 16385, range(100, 103))
    assert upper.location() == f"{lower.location().removesuffix('user')}User~~2"
    assert _ids(settings, "User") == [100, 101, 102]
