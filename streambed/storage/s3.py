"""The S3 settings as each client takes them, and the filesystem of a location.

`S3Access` holds the endpoint, region and credentials, read once from the settings
(`from_settings`); every client's form is derived from it here: pyiceberg's FileIO
properties, the options of the Spark data source (`streambed.spark.data_source`, whose
key names Spark redacts from plans and logs), DuckDB's secret, a boto3 client, and a
pyarrow S3FileSystem. The endpoint is parsed in one place (`endpoint_parts`): without a
scheme it is https. Path-style addressing is what pyarrow, pyiceberg and DuckDB are given
(pyiceberg's and pyarrow's default; DuckDB's and boto3's by option).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from streambed.storage.uris import split_uri

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from streambed.core.config import Settings

DEFAULT_REGION: Final = "us-east-1"


@dataclass(frozen=True)
class OptionNames:
    """The names one client gives the S3 options."""

    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str


FILEIO: Final = OptionNames("s3.endpoint", "s3.region", "s3.access-key-id", "s3.secret-access-key")
"""pyiceberg's FileIO property names (pyiceberg.io)."""
SOURCE: Final = OptionNames("s3.endpoint", "s3.region", "s3.access.key", "s3.secret.key")
"""The Spark data source's option names: Spark redacts options matching `secret` or
`access.key` from plans and logs (pyiceberg's `s3.access-key-id` would not be)."""
S3_ENDPOINT: Final = FILEIO.endpoint
S3_REGION: Final = FILEIO.region
S3_ACCESS_KEY_ID: Final = FILEIO.access_key_id
S3_SECRET_ACCESS_KEY: Final = FILEIO.secret_access_key


@dataclass(frozen=True)
class S3Access:
    """How to reach the warehouse's bucket: empty `endpoint` is AWS, empty
    `access_key_id` the AWS default credential chain."""

    endpoint: str = ""
    region: str = DEFAULT_REGION
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Access:
        return cls(
            settings.s3_endpoint,
            settings.s3_region or DEFAULT_REGION,
            settings.s3_access_key_id,
            settings.s3_secret_access_key,
        )

    def endpoint_parts(self) -> tuple[str, str]:
        """(host[:port], scheme) of the endpoint; ("", "https") for AWS."""
        if not self.endpoint:
            return "", "https"
        text = self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}"
        parts = urlsplit(text)
        return parts.netloc, parts.scheme

    def options(self, names: OptionNames) -> dict[str, str]:
        """The settings as a client's options (`FILEIO`, `SOURCE`): the region always, the
        endpoint and the credentials when set."""
        options = {names.region: self.region}
        if self.endpoint:
            options[names.endpoint] = self.endpoint
        if self.access_key_id:
            options[names.access_key_id] = self.access_key_id
            options[names.secret_access_key] = self.secret_access_key
        return options

    @classmethod
    def from_options(cls, options: Mapping[str, str], names: OptionNames) -> S3Access:
        return cls(
            options.get(names.endpoint, ""),
            options.get(names.region) or DEFAULT_REGION,
            options.get(names.access_key_id, ""),
            options.get(names.secret_access_key, ""),
        )

    def fileio_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties."""
        return self.options(FILEIO)

    @classmethod
    def from_fileio_properties(cls, properties: Mapping[str, str]) -> S3Access:
        """From pyiceberg FileIO properties (e.g. `table.io.properties`)."""
        return cls.from_options(properties, FILEIO)

    def source_options(self) -> dict[str, str]:
        """The Spark data source's options (`streambed.spark.data_source`)."""
        return self.options(SOURCE)

    @classmethod
    def from_source_options(cls, options: Mapping[str, str]) -> S3Access:
        return cls.from_options(options, SOURCE)

    # -- DuckDB ------------------------------------------------------------------------------

    def duckdb_secret(self, name: str) -> str:
        """CREATE SECRET for DuckDB's httpfs."""
        options = ["TYPE s3", f"REGION {_literal(self.region)}"]
        if self.access_key_id:
            options += [
                f"KEY_ID {_literal(self.access_key_id)}",
                f"SECRET {_literal(self.secret_access_key)}",
            ]
        if self.endpoint:
            host, scheme = self.endpoint_parts()
            options += [
                f"ENDPOINT {_literal(host)}",
                "URL_STYLE 'path'",
                f"USE_SSL {'true' if scheme == 'https' else 'false'}",
            ]
        return f"CREATE SECRET {name} ({', '.join(options)})"

    # -- pyarrow and boto3 -------------------------------------------------------------------

    def filesystem(self) -> pafs.S3FileSystem:
        kwargs: dict[str, object] = {"region": self.region}
        if self.endpoint:
            kwargs["endpoint_override"], kwargs["scheme"] = self.endpoint_parts()
        if self.access_key_id:
            kwargs["access_key"] = self.access_key_id
            kwargs["secret_key"] = self.secret_access_key
        return pafs.S3FileSystem(**kwargs)

    def client(self) -> S3Client:
        """A boto3 S3 client (short timeouts, two attempts, path-style addressing)."""
        import boto3  # only here; imported when a bucket is checked or created
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint or None,
            region_name=self.region,
            aws_access_key_id=self.access_key_id or None,
            aws_secret_access_key=self.secret_access_key or None,
            config=Config(
                connect_timeout=5,
                read_timeout=30,
                retries={"max_attempts": 2},
                s3={"addressing_style": "path"},
            ),
        )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def filesystem(uri: str, access: S3Access) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem for `uri` and the path inside it: the one factory."""
    scheme, path = split_uri(uri)
    if scheme == "s3":
        return access.filesystem(), path
    return pafs.LocalFileSystem(), path
