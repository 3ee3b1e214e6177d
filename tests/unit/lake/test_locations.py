"""Where lake tables live (`streambed.lake.locations`) and how their URIs map to paths
(`streambed.storage.uris.split_uri`): any Postgres name gives a directory of its own that
every reader addresses the same way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO

from streambed.core.errors import ConfigError, StorageError
from streambed.lake.locations import (
    APART,
    check_addressable,
    folded,
    segment,
    separate,
    table_location,
)
from streambed.storage.uris import split_uri

# What a Postgres identifier may hold: any character but NUL, at least one.
NAMES = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1)


def _decoded(directory: str) -> str:
    """`segment`'s inverse: each `~HH` run back to its UTF-8 bytes."""
    out = bytearray()
    i = 0
    while i < len(directory):
        if directory[i] == "~":
            out.append(int(directory[i + 1 : i + 3], 16))
            i += 3
        else:
            out.extend(directory[i].encode())
            i += 1
    return out.decode()


@given(NAMES)
def test_every_name_is_one_plain_directory_that_gives_the_name_back(name: str) -> None:
    directory = segment(name)
    assert re.fullmatch(r"(?:[\w.-]|~[0-9A-F]{2})+", directory), directory
    assert set(directory) != {"."}
    assert not {"/", "#", "?", "%", " ", "\\"} & set(directory)
    assert _decoded(directory) == name  # so two names never share a directory
    assert APART not in directory  # nor a directory `separate` gives


@given(NAMES, NAMES)
def test_different_names_get_different_directories(a: str, b: str) -> None:
    assert (segment(a) == segment(b)) == (a == b)


@pytest.mark.parametrize(
    ("name", "directory"),
    [
        ("orders", "orders"),
        ("User", "User"),
        ("naïve", "naïve"),
        ("dot.ted", "dot.ted"),
        ("snake_case-2", "snake_case-2"),
        ("Sales Dept", "Sales~20Dept"),
        ("a/b", "a~2Fb"),
        ("hash#tag", "hash~23tag"),
        ("q?x", "q~3Fx"),
        ("pct%41", "pct~2541"),
        ("~", "~7E"),
        (".", "~2E"),
        ("..", "~2E~2E"),
        ("..x", "..x"),
        ("é t", "é~20t"),
        ("a\u00a0b", "a~C2~A0b"),
    ],
)
def test_directories_of_names(name: str, directory: str) -> None:
    assert segment(name) == directory


def test_a_table_location_is_the_warehouse_then_schema_then_table() -> None:
    assert table_location("file:///wh/", "a/b", "c") == "file:///wh/a~2Fb/c"
    assert table_location("file:///wh", "a", "b/c") == "file:///wh/a/b~2Fc"
    assert table_location("s3://bucket/lake", "Sales Dept", "Order Items") == (
        "s3://bucket/lake/Sales~20Dept/Order~20Items"
    )


@given(NAMES, NAMES)
def test_pyiceberg_reads_every_table_location_whole(schema: str, name: str) -> None:
    for warehouse, path in (("file:///wh", "/wh"), ("s3://bucket/lake", "bucket/lake")):
        location = table_location(warehouse, schema, name)
        file = f"{location}/metadata/00000-x.metadata.json"
        expected = f"{path}/{segment(schema)}/{segment(name)}/metadata/00000-x.metadata.json"
        assert PyArrowFileIO.parse_location(file)[2] == expected
        assert split_uri(file)[1] == expected


def test_a_location_pyiceberg_would_cut_short_is_refused() -> None:
    check_addressable("s3://bucket/lake/public/orders", "public.orders")
    with pytest.raises(ConfigError, match=r"'#'.*Rename the source table.*EXCLUDE_TABLES"):
        check_addressable("s3://bucket/lake/public/hash#tag", "public.hash#tag")
    with pytest.raises(ConfigError, match=r"'\?'"):
        check_addressable("file:///wh/public/q?x", "public.q?x")


def test_uris_are_not_percent_decoded() -> None:
    assert split_uri("file:///wh/t/a%20b.parquet") == ("file", "/wh/t/a%20b.parquet")
    assert split_uri("file:///wh/Sales Dept/x#1") == ("file", "/wh/Sales Dept/x#1")
    assert split_uri("s3a://bucket/k/a b/") == ("s3", "bucket/k/a b")
    assert split_uri("/plain/path") == ("file", "/plain/path")
    with pytest.raises(StorageError, match="use a local path or s3://"):
        split_uri("gs://bucket/x")


def _never() -> list[str]:
    raise AssertionError("the other tables are looked up only for a directory that exists")


def test_a_location_is_separated_only_from_another_tables_directory(tmp_path: Path) -> None:
    s3 = "s3://bucket/lake/public/User"
    assert separate(s3, _never) == s3  # S3 tells every key apart
    new = f"file://{tmp_path}/public/user"
    assert separate(new, _never) == new  # nothing there yet
    (tmp_path / "public" / "user").mkdir(parents=True)
    assert separate(new, list) == new  # its own old directory (a table created again)
    (tmp_path / "public" / "User").symlink_to("user")  # a filesystem blind to case
    upper = f"file://{tmp_path}/public/User"
    assert separate(upper, lambda: [new]) == f"{upper}{APART}2"
    assert separate(upper, lambda: [f"s3://bucket/{tmp_path}/public/user"]) == upper
    (tmp_path / "public" / f"User{APART}2").mkdir()
    (tmp_path / "public" / f"user{APART}2").symlink_to(f"User{APART}2")
    assert separate(new, lambda: [upper, f"{upper}{APART}2"]) == f"{new}{APART}3"


def test_folded_names_are_those_a_case_insensitive_filesystem_does_not_tell_apart() -> None:
    assert folded("User") == folded("USER") == folded("user")
    assert folded("Stra\u00dfe") == folded("STRASSE")
    assert folded("caf\u00e9") == folded("cafe\u0301")  # composed and decomposed
    assert folded("user") != folded("users")
