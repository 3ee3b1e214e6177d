"""`streambed.storage.s3`: the one mapping from the S3 settings to each client's form."""

from __future__ import annotations

import duckdb
import pyarrow.fs as pafs
import pytest

from streambed.core.config import Settings
from streambed.server.extensions import load_extensions, offline_config
from streambed.storage.s3 import S3Access, filesystem

ACCESS = S3Access("http://127.0.0.1:8333", "eu-west-1", "AKID", "sec'ret")


def test_from_settings_and_every_form_round_trips() -> None:
    settings = Settings(
        source_url="postgresql://u@localhost/db",
        s3_bucket="b",
        s3_endpoint="http://127.0.0.1:8333",
        s3_region="eu-west-1",
        s3_access_key_id="AKID",
        s3_secret_access_key="sec'ret",
    )
    access = S3Access.from_settings(settings)
    assert access == ACCESS
    assert "sec'ret" not in repr(access)
    assert access.fileio_properties() == {
        "s3.endpoint": "http://127.0.0.1:8333",
        "s3.region": "eu-west-1",
        "s3.access-key-id": "AKID",
        "s3.secret-access-key": "sec'ret",
    }
    assert access.source_options() == {
        "s3.endpoint": "http://127.0.0.1:8333",
        "s3.region": "eu-west-1",
        "s3.access.key": "AKID",
        "s3.secret.key": "sec'ret",
    }
    assert S3Access.from_fileio_properties(access.fileio_properties()) == access
    assert S3Access.from_source_options(access.source_options()) == access


def test_aws_defaults() -> None:
    access = S3Access.from_source_options({})
    assert access == S3Access() and access.region == "us-east-1"
    assert access.fileio_properties() == {"s3.region": "us-east-1"}
    assert access.source_options() == {"s3.region": "us-east-1"}
    assert access.endpoint_parts() == ("", "https")


@pytest.mark.parametrize(
    ("endpoint", "parts"),
    [
        ("http://127.0.0.1:8333", ("127.0.0.1:8333", "http")),
        ("https://s3.example.com", ("s3.example.com", "https")),
        ("s3.example.com:9000", ("s3.example.com:9000", "https")),  # no scheme: https
        ("http://minio:9000/", ("minio:9000", "http")),
    ],
)
def test_one_endpoint_parse(endpoint: str, parts: tuple[str, str]) -> None:
    access = S3Access(endpoint)
    assert access.endpoint_parts() == parts
    # the pyarrow filesystem of every caller comes from the same parse
    for fs, path in (
        filesystem("s3://bucket/a/b.parquet", access),
        filesystem(
            "s3://bucket/a/b.parquet", S3Access.from_source_options(access.source_options())
        ),
        filesystem(
            "s3://bucket/a/b.parquet", S3Access.from_fileio_properties(access.fileio_properties())
        ),
    ):
        assert isinstance(fs, pafs.S3FileSystem) and path == "bucket/a/b.parquet"
        assert fs.region == "us-east-1"


def test_local_paths_are_local() -> None:
    fs, path = filesystem("file:///tmp/w/x.parquet", ACCESS)
    assert isinstance(fs, pafs.LocalFileSystem) and path == "/tmp/w/x.parquet"


def test_duckdb_secret(tmp_path_factory: pytest.TempPathFactory) -> None:
    directory = tmp_path_factory.mktemp("extensions")
    config: dict[str, str | bool | int | float | list[str]] = dict(offline_config(str(directory)))
    conn = duckdb.connect(":memory:", config=config)
    try:
        load_extensions(conn)
        conn.execute(ACCESS.duckdb_secret("streambed_s3"))
        (secret,) = conn.execute(
            "SELECT secret_string FROM duckdb_secrets(redact := true) WHERE name = 'streambed_s3'"
        ).fetchone() or ("",)
    finally:
        conn.close()
    assert "endpoint=127.0.0.1:8333" in secret
    assert "region=eu-west-1" in secret
    assert "use_ssl=false" in secret
    assert "url_style=path" in secret
    assert "key_id=AKID" in secret
    assert "sec'ret" not in secret
