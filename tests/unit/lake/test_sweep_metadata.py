"""Which names under a table's metadata directory the sweep may delete at all."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.table.update.snapshot import _new_manifest_file_name, _new_manifest_list_file_name

from streambed.lake.sweep_metadata import is_metadata_file

U = "7c9e6679-7425-40de-944b-e07fc1f90ae7"


@pytest.mark.parametrize(
    "name",
    [
        f"00012-{U}.metadata.json",  # pyiceberg and Java
        f"v3-{U}.metadata.json.gz",  # Java, compressed
        f"snap-4358093526523409876-0-{U}.avro",  # manifest lists
        f"{U}-m0.avro",  # manifests
        f"{U}-m12.avro",
    ],
)
def test_iceberg_metadata_names_may_go(name: str) -> None:
    assert is_metadata_file(f"bucket/warehouse/public/orders/metadata/{name}")
    assert is_metadata_file(name)


@pytest.mark.parametrize(
    "name",
    [
        "version-hint.text",
        f"{U}.stats",  # a Puffin statistics file: kept unless referenced rules say otherwise
        f"{U}.avro",
        f"{U}-m.avro",
        "notes.json",
        ".metadata.json",
        f"00012-{U}.metadata.json.tmp",
        f"{U}-m0.avro.crc",
        "part-00000.parquet",
    ],
)
def test_other_names_stay(name: str) -> None:
    assert not is_metadata_file(f"warehouse/public/orders/metadata/{name}")


@given(st.uuids(), st.integers(min_value=0, max_value=10**6), st.integers(min_value=1))
def test_every_manifest_and_list_name_pyiceberg_makes_may_go(
    commit: uuid.UUID, num: int, snapshot_id: int
) -> None:
    assert is_metadata_file(_new_manifest_file_name(num, commit))
    assert is_metadata_file(_new_manifest_list_file_name(snapshot_id, num, commit))


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_.0123456789", max_size=40))
def test_a_name_that_only_contains_a_pattern_stays(stem: str) -> None:
    assert not is_metadata_file(f"{stem}.metadata.json.bak")
    assert not is_metadata_file(f"{stem}-m0.avro.old")
