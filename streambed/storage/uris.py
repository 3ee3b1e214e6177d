"""Warehouse URIs: which filesystem a location is on, and its path there."""

from __future__ import annotations

from streambed.core.errors import StorageError


def split_uri(uri: str) -> tuple[str, str]:
    """(scheme, filesystem path) of a warehouse URI: file:///a/b → ("file", "/a/b"),
    s3://bucket/key → ("s3", "bucket/key"); a plain path is local. The lake's URIs are not
    percent-encoded (`streambed.lake.locations`): the path is the URI's rest as it is."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return "file", uri
    if scheme in ("s3", "s3a", "s3n"):
        return "s3", rest.rstrip("/")
    if scheme == "file":
        return "file", rest
    raise StorageError(f"unsupported storage location {uri!r}: use a local path or s3://")
